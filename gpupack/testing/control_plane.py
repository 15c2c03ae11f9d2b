"""A real Kubernetes control plane for the tests: etcd (Debian's `etcd-server`) and kube-apiserver, kube-scheduler
and kubectl built from the pinned k8s.io/kubernetes module (`tools/build`), on free loopback ports.
`gpupack/testing/living_cluster.py` adds the rest of a cluster to one (kube-controller-manager, kwok, Karpenter).

The API server runs with RBAC, service-account token signing and the admission plugins a cluster runs
(`MutatingAdmissionWebhook`, `ValidatingAdmissionWebhook`, `Priority` among the defaults). There is no kubelet and
no controller manager: nodes are API objects whose status a test writes (`ControlPlane.node`), a namespace gets its
`default` ServiceAccount from `ControlPlane.namespace` (the controller manager would create it), and
`Kubelet` stands in for the one kubelet duty the scheduler's tests need, removing pods that are being deleted.

Every process writes its log into the test's folder; `Processes.reports` hands the logs of a failed test to pytest,
and `forbidden_lines` finds RBAC refusals in them (any is a defect of the shipped RBAC).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpupack.core.checkout import REPOSITORY
from gpupack.testing.net import free_port

ROOT = REPOSITORY
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


@dataclass(frozen=True)
class Tools:
    """Where the upstream binaries are (`tools/build` prints them).

    The living cluster's (`gpupack.testing.living_cluster`) are None when `tools/build` could not build them (it builds
    the others regardless); `files` are the other files it prints by name: Karpenter's CRDs (`karpenter-crd-...`)
    and kwok's Stages (`kwok-stage-...`), copied from the module cache."""

    kube_apiserver: Path
    kube_scheduler: Path
    kubectl: Path
    helm: Path
    kube_controller_manager: Path | None = None
    kwok: Path | None = None
    karpenter_kwok: Path | None = None
    files: Mapping[str, Path] = field(default_factory=dict, hash=False)
    build_log: str = field(default="", compare=False)
    """What `tools/build` said on stderr: why a living-cluster tool is missing."""


@cache
def tools() -> Tools:
    """The built tools; `tools/build` builds what is missing first (`make test` already did)."""
    done = subprocess.run([str(ROOT / "tools" / "build")], capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/build failed:\n{done.stderr[-4000:]}")
    found = {name: Path(path) for name, path in (line.split("=", 1) for line in done.stdout.split())}
    core = ("kube-apiserver", "kube-scheduler", "kubectl", "helm")
    living = ("kube-controller-manager", "kwok", "karpenter-kwok")
    return Tools(
        kube_apiserver=found["kube-apiserver"],
        kube_scheduler=found["kube-scheduler"],
        kubectl=found["kubectl"],
        helm=found["helm"],
        kube_controller_manager=found.get("kube-controller-manager"),
        kwok=found.get("kwok"),
        karpenter_kwok=found.get("karpenter-kwok"),
        files={name: path for name, path in found.items() if name not in core + living},
        build_log=done.stderr,
    )


# certificates -----------------------------------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class Authority:
    """The cluster CA: signs the API server's serving certificate and the clients' certificates."""

    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self.name = name
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, common_name: str, groups: Sequence[str] = (), dns: Sequence[str] = (), ips: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """A certificate and key: a client's (`groups` are its organizations, RBAC's groups) or, with SANs, a
        server's."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
            + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if dns or ips else ExtendedKeyUsageOID.CLIENT_AUTH
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), _pem_key(key)


# processes --------------------------------------------------------------------------------------------------------


@dataclass
class Process:
    """One long-running program with its log file."""

    name: str
    argv: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=dict(self.env) if self.env else None
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        """Stop it (SIGTERM, then SIGKILL after `timeout`); SIGKILL at once is a crash."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.popen.returncode}:\n{self.text()[-3000:]}")


FORBIDDEN_MARKS = (
    "forbidden",
    "Forbidden",
    "cannot list resource",
    "cannot get resource",
    "cannot watch resource",
    "HTTP 403",  # gpupack's own one-line reasons (`gpupack.core.kube.failure_reason`): a Lease it may not read
)


def forbidden_lines(text: str) -> list[str]:
    """The lines of a log where the API server refused a request for lack of permission."""
    return [line for line in text.splitlines() if any(mark in line for mark in FORBIDDEN_MARKS)]


def wait_until(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """`condition()`'s first truthy value, polling; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def host_address() -> str:
    """A non-loopback IPv4 address of this machine: the API server refuses Endpoints on loopback, so a webhook
    Service's endpoint is the machine's own address (the webhook listens on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel picks the outgoing address
        address: str = s.getsockname()[0]
    if ipaddress.ip_address(address).is_loopback:
        raise RuntimeError("this machine has no non-loopback IPv4 address for a webhook endpoint")
    return address


# the control plane ------------------------------------------------------------------------------------------------


class ControlPlane:
    """etcd and kube-apiserver, an admin kubeconfig, and helpers to make the objects a cluster's controllers and
    kubelets would."""

    def __init__(self, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.tools = tools()
        self.ca = Authority()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.processes: list[Process] = []
        pki = workdir / "pki"
        pki.mkdir(exist_ok=True)
        (pki / "ca.crt").write_bytes(self.ca.pem)
        crt, key = self.ca.issue("kube-apiserver", dns=["localhost", "kubernetes.default.svc"], ips=["127.0.0.1"])
        (pki / "apiserver.crt").write_bytes(crt)
        (pki / "apiserver.key").write_bytes(key)
        (pki / "ca.key").write_bytes(_pem_key(self.ca.key))
        service_accounts = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(_pem_key(service_accounts))
        self.pki = pki
        self.ca_cert = pki / "ca.crt"
        """The cluster CA's certificate (clients verify the API server with it; kube-controller-manager publishes it
        as each namespace's `kube-root-ca.crt`)."""
        self.ca_key = pki / "ca.key"
        """The CA's key: kube-controller-manager's CSR signer signs with it (`--cluster-signing-key-file`)."""
        self.service_account_key = pki / "sa.key"
        """The key the API server signs service-account tokens with and verifies them by; kube-controller-manager's
        token controller signs with it too (`--service-account-private-key-file`)."""
        self.admin_kubeconfig = self.client_kubeconfig("admin", ["system:masters"])
        etcd_port, peer_port = free_port(), free_port()
        self.etcd = Process(
            "etcd",
            [
                ETCD,
                "--data-dir",
                str(workdir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
            ],
            workdir / "etcd.log",
        )
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.apiserver = Process(
            "kube-apiserver",
            [
                str(self.tools.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                # Webhook Services resolve to their endpoints (there is no kube-proxy for a ClusterIP).
                "--enable-aggregator-routing=true",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,Priority",
                "--profiling=false",
                *extra_args,
            ],
            workdir / "kube-apiserver.log",
        )

    # lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.etcd.start()
        self.apiserver.start()
        wait_until(self._ready, 60, "kube-apiserver /readyz")
        wait_until(lambda: self.get("/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical"), 30, "bootstrap")
        return self

    def _ready(self) -> bool:
        self.apiserver.check_alive()
        self.etcd.check_alive()
        try:
            with self._open("GET", "/readyz", None) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.apiserver.stop()
        self.etcd.stop()

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        """Start a program beside the control plane; `stop()` stops it."""
        process = Process(name, argv, self.workdir / f"{name}.log", env).start()
        self.processes.append(process)
        return process

    def logs(self) -> dict[str, str]:
        """Every process's log by name."""
        return {p.name: p.text() for p in [self.etcd, self.apiserver, *self.processes]}

    # clients -----------------------------------------------------------------------------------------------------

    def _kubeconfig(self, name: str, user: dict[str, str]) -> Path:
        path = self.workdir / f"{name}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.pki / "ca.crt")}}
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}],
            "current-context": name,
        }
        path.write_text(json.dumps(config))
        return path

    def client_kubeconfig(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig authenticating with a client certificate for user `name` in `groups`."""
        crt, key = self.ca.issue(name, groups)
        (self.pki / f"{name}.crt").write_bytes(crt)
        (self.pki / f"{name}.key").write_bytes(key)
        return self._kubeconfig(
            name, {"client-certificate": str(self.pki / f"{name}.crt"), "client-key": str(self.pki / f"{name}.key")}
        )

    def service_account_kubeconfig(self, namespace: str, name: str, seconds: int = 7200) -> Path:
        """A kubeconfig with a token the API server issued for the ServiceAccount (TokenRequest), as a pod of that
        ServiceAccount is given: the services authenticate as deployed, so RBAC is the shipped RBAC."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        return self._kubeconfig(f"{namespace}-{name}", {"token": answer["status"]["token"]})

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def _open(self, method: str, path: str, body: Any, content_type: str = "application/json") -> Any:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        return urllib.request.urlopen(request, context=self._context(), timeout=30)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """One API call as admin; the decoded JSON answer. urllib's HTTPError on an error status."""
        with self._open(method, path, body, content_type) as answer:
            return json.loads(answer.read() or b"null")

    def watch(self, path: str, stop: threading.Event, timeout: int = 60) -> Iterator[dict[str, Any]]:
        """The watch events of a collection (`/api/v1/pods`), from a list onward, until `stop` is set: ADDED for
        what exists, then each change, re-opened where it ended (a watch that expired lists again). Every
        MODIFIED event is seen, so a condition set a moment before a deletion is not missed as by polling."""
        version = ""
        while not stop.is_set():
            if not version:
                listed = self.request("GET", path)
                version = listed["metadata"]["resourceVersion"]
                for item in listed["items"]:
                    yield {"type": "ADDED", "object": item}
            query = f"?watch=1&resourceVersion={version}&timeoutSeconds={timeout}&allowWatchBookmarks=true"
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(self.url + path + query), context=self._context(), timeout=timeout + 10
                ) as stream:
                    for line in stream:
                        if stop.is_set():
                            return
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            version = ""  # gone: list again
                            break
                        version = event["object"]["metadata"].get("resourceVersion") or version
                        if event.get("type") != "BOOKMARK":
                            yield event
            except (OSError, urllib.error.URLError, json.JSONDecodeError):
                time.sleep(0.5)

    def get(self, path: str) -> Any:
        """GET as admin, None for 404."""
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                exc.close()  # it holds the answer's socket
                return None
            raise

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The built kubectl against this API server (admin unless `kubeconfig`)."""
        argv = [str(self.tools.kubectl), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def apply(self, objects: Sequence[Mapping[str, Any]] | str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`kubectl apply -f -` of these objects (or YAML text)."""
        text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects))
        return self.kubectl("apply", "-f", "-", stdin=text, **kwargs)

    # what a cluster's controllers and kubelets would make --------------------------------------------------------

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """A namespace with its `default` ServiceAccount (the controller manager's job)."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        self.request("POST", "/api/v1/namespaces", body)
        self.service_account(name, "default")

    def service_account(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def node(
        self,
        name: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """A Node as a kubelet registers it and reports it: labels, taints, and a Ready status with `allocatable`.
        The API server's TaintNodesByCondition plugin gives a new node the `not-ready` taint; the node lifecycle
        controller would lift it once the node is Ready, so this does."""
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **dict(labels or {})}},
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        }
        created = self.request("POST", "/api/v1/nodes", body)
        kept = [t for t in created["spec"].get("taints", []) if t["key"] != "node.kubernetes.io/not-ready"]
        self.request(
            "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}}, "application/merge-patch+json"
        )
        capacity = {"pods": "110", **dict(allocatable)}
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    },
                ],
            }
        }
        node: dict[str, Any] = self.request(
            "PATCH", f"/api/v1/nodes/{name}/status", status, "application/strategic-merge-patch+json"
        )
        return node

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return found

    def events(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        return items

    def scheduled(self, namespace: str, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """The pod once a scheduler has bound it."""
        found: dict[str, Any] = wait_until(
            lambda: (p := self.pod(namespace, name)) and p["spec"].get("nodeName") and p,
            timeout,
            f"{namespace}/{name} bound",
        )
        return found


class Kubelet:
    """Stands in for the kubelets: a pod being deleted (graceful, `deletionTimestamp` set) is removed, as a kubelet
    does once its containers stopped, so a preempted pod does not stay Terminating for ever."""

    def __init__(self, plane: ControlPlane, every: float = 0.5) -> None:
        self.plane = plane
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                pods = self.plane.request("GET", "/api/v1/pods")["items"]
            except OSError:
                continue
            for pod in pods:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
                    try:
                        self.plane.request(
                            "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body
                        )
                    except (OSError, urllib.error.HTTPError):
                        pass


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def scheduler_config(source: Mapping[str, Any], kubeconfig: Path, extender_port: int | None = None) -> dict[str, Any]:
    """A shipped KubeSchedulerConfiguration as it runs here: the same document with the client connection
    pointed at the test API server (in a pod it is the in-cluster service account) and, when given, the extender's
    port (in a pod the sidecar owns 8888 on the pod's loopback; here the machine's loopback is shared)."""
    config: dict[str, Any] = json.loads(json.dumps(source))
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    if extender_port is not None:
        for extender in config.get("extenders", []):
            extender["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    return config


def iter_documents(text: str) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(text):
        if doc:
            yield doc


def env_without_proxy() -> dict[str, str]:
    """This environment without proxy variables (loopback and the host address must not go through one)."""
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
