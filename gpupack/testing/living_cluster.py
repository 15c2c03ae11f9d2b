"""A living cluster on a real control plane: nodes come and go through Karpenter, workloads live.

`LivingCluster(plane).start()` adds to a started `ControlPlane` what a cluster runs besides the API server:

- kube-controller-manager (service-account tokens and each controller with its own account, as kubeadm runs it):
  ServiceAccounts and their tokens, Deployments and ReplicaSets, Jobs, PodDisruptionBudget status, garbage
  collection, the node lifecycle controller (it lifts the API server's `not-ready` taint once a node is Ready,
  and taints a node whose lease stops), taint eviction, ResourceClaims. The controllers a cloud or a network
  plugin owns are off.
- kube-scheduler with the default profile (`default-scheduler`), for the pods no other scheduler takes.
- kwok, the kubelets of Karpenter's nodes only (those with the annotation `kwok.x-k8s.io/node=fake`): it makes them
  Ready and renews their leases, runs the pods bound to them, removes the pods being deleted, and ends a pod that
  says how long it runs (`RUN_FOR`, a Stage of ours: living-cluster/stage-pod-run-for.yaml).
- Karpenter's KWOK provider, out of cluster: it buys a node (a Node object) for pods kube-scheduler could not
  place, from one NodePool per GPU model (A100 MIG, H100, T4 time-sliced; living-cluster/), and removes
  the nodes consolidation finds empty or underused.

Every process logs into the plane's folder (`karpenter.log` at debug level: its disruption decisions), and the
plane stops them all. living-cluster/README.md says where each fact came from; the build is `tools/build`.
"""

from __future__ import annotations

import copy
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpupack.testing.control_plane import (
    ControlPlane,
    Process,
    env_without_proxy,
    iter_documents,
    tools,
    wait_until,
)
from gpupack.testing.net import free_port

FIXTURES = Path(__file__).resolve().parent / "living-cluster"
RUN_FOR = "gpupack.test/run-for"
"""Pod annotation: how long the pod runs once started, a Go duration (`"90s"`, `"2m"`); then kwok ends it
Succeeded. Only for pods a kubelet leaves finished (restartPolicy Never or OnFailure: bare pods, Jobs)."""
KWOK_NODE = "kwok.x-k8s.io/node"
"""The annotation (value `fake`) Karpenter's KWOK provider puts on its nodes: kwok manages those only."""
NODEPOOL = "karpenter.sh/nodepool"
"""The label Karpenter puts on its nodes and NodeClaims: the NodePool's name."""
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
"""The taint of every GPU NodePool (living-cluster/nodepools.yaml): a pod without a GPU makes Karpenter
buy no GPU node."""
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
IMAGE = "registry.example/job:1"
"""No image is ever pulled (kwok runs the pods)."""
KUBE_CONTROLLER_MANAGER_CONTROLLERS = (
    "*,-node-ipam-controller,-service-lb-controller,-node-route-controller,-cloud-node-lifecycle-controller"
)
"""Every controller but those that need a cloud or a pod network (no `--cluster-cidr` to hand out, no load
balancer, no routes, no cloud to ask whether a node still exists)."""
PLANE_ARGS = ("--feature-gates=WatchList=false",)
"""kube-apiserver's arguments a living cluster needs: pass them to `ControlPlane(..., extra_args=PLANE_ARGS)`.

kwok v0.8.0 opens every watch at resourceVersion "0"; an API server with the WatchList feature (beta, on since
1.34) takes such a watch for a streaming list, which needs etcd's watch progress requests, which Debian's etcd 3.4
lacks: the watch ends at once ("a watch stream was requested by the client but the required storage feature
RequestWatchProgress is disabled"), and kwok sees a change only when it lists again, seconds later (a bound pod ran
about 15 s late, a run-for pod ended 8 s late). Without WatchList, that watch is the legacy one (every object, then
changes); the other clients, asked for no streaming list, fall back to list and watch as they do on any server
without it. `KUBE_FEATURE_WatchListClient=false` in kwok's environment does not help: it is the server's defaulting."""
CRDS = (
    "karpenter-crd-nodepools",
    "karpenter-crd-nodeclaims",
    "karpenter-crd-nodeoverlays",
    "karpenter-crd-kwoknodeclasses",
)
"""`tools/build`'s names of Karpenter's CRDs (copied from the sigs.k8s.io/karpenter module)."""
STAGES = (
    "kwok-stage-node-initialize",
    "kwok-stage-node-heartbeat-with-lease",
    "kwok-stage-pod-ready",
    "kwok-stage-pod-delete",
)
"""`tools/build`'s names of kwok's own Stages (from the sigs.k8s.io/kwok module): a node Ready at once, its lease
renewed, a bound pod Running at once, a pod being deleted removed at once."""


def missing_tools() -> str | None:
    """Why a living cluster cannot start here (a tool `tools/build` did not build), None when it can."""
    found = tools()
    wanted = {
        "kube-controller-manager": found.kube_controller_manager,
        "kwok": found.kwok,
        "karpenter-kwok": found.karpenter_kwok,
        **{name: found.files.get(name) for name in CRDS + STAGES},
    }
    absent = [name for name, path in wanted.items() if path is None or not path.exists()]
    if not absent:
        return None
    said = " ".join(line for line in found.build_log.splitlines() if "could not" in line)
    return f"tools/build did not build {', '.join(absent)} {said}".strip()


_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:h|ms|m|s))+")


def run_for_seconds(value: str) -> float:
    """Seconds of a Go duration as the Stage reads it (h, m, s, ms; `"1m30s"`); ValueError for anything else,
    which the Stage would take as no delay at all."""
    if not _DURATION.fullmatch(value):
        raise ValueError(f"not a Go duration the run-for Stage reads: {value!r} (use e.g. '90s', '2m', '1h30m')")
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", value))


def overlay_for_pool(path: Path, pool: str) -> dict[str, Any]:
    """A NodeOverlay file (one document) selecting NodePool `pool` in place of the pool it names."""
    (overlay,) = iter_documents(path.read_text())
    for requirement in overlay["spec"]["requirements"]:
        if requirement["key"] == NODEPOOL:
            requirement["values"] = [pool]
    found: dict[str, Any] = overlay
    return found


def whole_gpu_instance_types(path: Path, gpus: Mapping[str, int]) -> Path:
    """instance-types.json written to `path` with the types named in `gpus` advertising that many whole
    `nvidia.com/gpu` and no MIG device or time-sliced replica: what a cloud provider says of a machine whose GPUs
    nobody has partitioned yet."""
    types = json.loads((FIXTURES / "instance-types.json").read_text())
    for found in types:
        if found["name"] in gpus:
            kept = {k: v for k, v in found["resources"].items() if not k.startswith("nvidia.com/")}
            found["resources"] = {**kept, "nvidia.com/gpu": str(gpus[found["name"]])}
    path.write_text(json.dumps(types))
    return path


def pod_spec(
    requests: Mapping[str, str],
    *,
    restart_policy: str = "Never",
    tolerations: Sequence[Mapping[str, str]] = (GPU_TOLERATION,),
    scheduler: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod spec of one container asking for `requests` (also its limits: an extended resource needs both equal),
    tolerating the GPU NodePools' taint; `scheduler` names another scheduler than the default one."""
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
        "tolerations": [dict(t) for t in tolerations],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return spec


def _metadata(
    name: str, namespace: str, labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels or {}), "annotations": dict(annotations or {})}


def _run_for(run_for: str | None, annotations: Mapping[str, str] | None) -> dict[str, str]:
    found = dict(annotations or {})
    if run_for is not None:
        run_for_seconds(run_for)  # refuse what the Stage would read as "no delay"
        found[RUN_FOR] = run_for
    return found


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric `name` in Prometheus text: (labels, value) each."""
    found = []
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{(.*)\}})?\s+(\S+)")
    for line in text.splitlines():
        if match := pattern.match(line):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1) or ""))
            found.append((labels, float(match.group(2))))
    return found


class LivingCluster:
    """kube-controller-manager, a default kube-scheduler, kwok and Karpenter beside a started `ControlPlane`, with
    the GPU NodePools; `start()` returns once Karpenter is ready and the NodePools are Ready.

    `consolidation_policy` and `consolidate_after` go into every NodePool's `spec.disruption` (Karpenter's
    `WhenEmpty`, `WhenEmptyOrUnderutilized` or `Balanced`; a duration or `Never`). `node_pools` picks some of
    nodepools.yaml's (`a100`, `h100`, `t4`); `karpenter_env` adds to Karpenter's environment (`FEATURE_GATES`,
    `BATCH_IDLE_DURATION`...).

    Nodes made with `ControlPlane.node` have no kubelet here: nothing renews their lease, so the node lifecycle
    controller takes them for unreachable about 50 s later (taints, then evicts their pods). Karpenter's nodes
    are kwok's.
    """

    def __init__(
        self,
        plane: ControlPlane,
        *,
        consolidation_policy: str = "WhenEmptyOrUnderutilized",
        consolidate_after: str = "10s",
        node_pools: Sequence[str] | None = None,
        karpenter_env: Mapping[str, str] | None = None,
    ) -> None:
        self.plane = plane
        self.tools = tools()
        self.consolidation_policy = consolidation_policy
        self.consolidate_after = consolidate_after
        self.node_pool_names = tuple(node_pools) if node_pools is not None else None
        self.karpenter_env = dict(karpenter_env or {})
        self.workdir = plane.workdir / "living-cluster"
        self.processes: dict[str, Process] = {}
        self.metrics_port = 0
        self.health_port = 0
        self.started_seconds: dict[str, float] = {}
        """How long each start-up step took (CRDs, the controllers, Karpenter ready, NodePools Ready)."""

    # lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> LivingCluster:
        reason = missing_tools()
        if reason:
            raise RuntimeError(reason)
        if not set(PLANE_ARGS) <= set(self.plane.apiserver.argv):
            raise ValueError(
                f"start the ControlPlane with extra_args={PLANE_ARGS} (living_cluster.PLANE_ARGS says why)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        # The CRDs first (Karpenter reads them at start), the three controllers meanwhile: they need nothing of
        # each other to start.
        self._start_controller_manager()
        scheduler_port = self._start_scheduler()
        kwok_port = self._start_kwok()
        self.plane.kubectl("apply", "--server-side", *(f"--filename={self.tools.files[c]}" for c in CRDS))
        self.plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh", "crd/nodeoverlays.karpenter.sh",
            "crd/kwoknodeclasses.karpenter.kwok.sh",
        )  # fmt: skip
        self._step("crds", began)
        self._start_karpenter()
        self._wait_healthy("kube-scheduler", f"https://127.0.0.1:{scheduler_port}/healthz")
        self._wait_healthy("kwok", f"http://127.0.0.1:{kwok_port}/healthz")
        # kube-controller-manager is up when its controllers work: the service-account controller gives
        # `default` its ServiceAccount, the root CA publisher its `kube-root-ca.crt`.
        wait_until(
            lambda: (
                self._alive()
                and self.plane.get("/api/v1/namespaces/default/serviceaccounts/default")
                and self.plane.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            ),
            60,
            "kube-controller-manager's controllers (the default ServiceAccount and kube-root-ca.crt)",
        )
        self._step("controllers", began)
        self._wait_healthy("karpenter", f"http://127.0.0.1:{self.health_port}/readyz", timeout=90)
        self._step("karpenter", began)
        self.plane.apply(self.node_class_documents() + self.node_pool_documents())
        for pool in self.node_pool_documents():
            self.wait_node_pool(pool["metadata"]["name"], "Ready")
        self._step("nodepools", began)
        return self

    def stop(self) -> None:
        """Stop Karpenter first (it would buy nodes for pods the others leave), then the others. The plane's `stop`
        stops them too."""
        for process in reversed(list(self.processes.values())):
            process.stop()

    def __enter__(self) -> LivingCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _step(self, name: str, began: float) -> None:
        self.started_seconds[name] = round(time.monotonic() - began, 1)

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        self.processes[name] = process = self.plane.spawn(name, argv, env)
        return process

    def _alive(self) -> bool:
        for process in self.processes.values():
            process.check_alive()
        return True

    def _wait_healthy(self, name: str, url: str, timeout: float = 60) -> None:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate

        def healthy() -> bool:
            self._alive()
            try:
                with urllib.request.urlopen(url, timeout=5, context=insecure) as answer:
                    return bool(answer.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        wait_until(healthy, timeout, f"{name} {url}", every=0.3)

    def _start_controller_manager(self) -> None:
        """kube-controller-manager as kubeadm runs it (its own identity, each controller with its ServiceAccount's
        token) but out of cluster and without a serving port."""
        plane = self.plane
        assert self.tools.kube_controller_manager is not None
        kubeconfig = plane.client_kubeconfig("system:kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                str(self.tools.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={plane.service_account_key}",
                f"--root-ca-file={plane.ca_cert}",
                f"--cluster-signing-cert-file={plane.ca_cert}",
                f"--cluster-signing-key-file={plane.ca_key}",
                f"--controllers={KUBE_CONTROLLER_MANAGER_CONTROLLERS}",
                "--concurrent-gc-syncs=5",
            ],
        )

    def _start_scheduler(self) -> int:
        """kube-scheduler with the default profile only (`default-scheduler`), as its own user; the port serves
        /healthz."""
        plane = self.plane
        kubeconfig = plane.client_kubeconfig("system:kube-scheduler")
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                str(self.tools.kube_scheduler),
                f"--config={path}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # No front proxy here: without this it reads a request-header CA the API server has not and logs
                # an error about it every few seconds.
                "--authentication-skip-lookup=true",
            ],
        )
        return port

    def _start_kwok(self) -> int:
        """kwok for Karpenter's nodes only; its port serves /healthz once its controllers run."""
        assert self.tools.kwok is not None
        kubeconfig = self.plane.client_kubeconfig("kwok", ["system:masters"])
        stages = [self.tools.files[s] for s in STAGES] + [FIXTURES / "stage-pod-run-for.yaml"]
        port = free_port()
        self._spawn(
            "kwok",
            [
                str(self.tools.kwok),
                f"--kubeconfig={kubeconfig}",
                f"--config={','.join(str(s) for s in stages)}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE}=fake",
                # The node lifecycle controller reads a lease renewed within its grace period (50 s) as a heartbeat.
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{port}",
            ],
        )
        return port

    def _start_karpenter(self) -> None:
        """Karpenter's KWOK provider out of cluster, configured by its environment (it takes no --kubeconfig)."""
        assert self.tools.karpenter_kwok is not None
        kubeconfig = self.plane.client_kubeconfig("karpenter", ["system:masters"])
        self.metrics_port, self.health_port = free_port(), free_port()
        env = {
            **env_without_proxy(),
            "KUBECONFIG": str(kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "INSTANCE_TYPES_FILE_PATH": str(FIXTURES / "instance-types.json"),
            "LOG_LEVEL": "debug",
            **self.karpenter_env,
        }
        self._spawn("karpenter", [str(self.tools.karpenter_kwok)], env)

    # the cluster's objects ---------------------------------------------------------------------------------------

    def node_class_documents(self) -> list[dict[str, Any]]:
        return list(iter_documents((FIXTURES / "kwoknodeclass.yaml").read_text()))

    def node_pool_documents(self) -> list[dict[str, Any]]:
        """nodepools.yaml with this cluster's consolidation policy and delay."""
        pools = []
        for doc in iter_documents((FIXTURES / "nodepools.yaml").read_text()):
            if self.node_pool_names is not None and doc["metadata"]["name"] not in self.node_pool_names:
                continue
            doc = copy.deepcopy(doc)
            doc["spec"]["disruption"]["consolidationPolicy"] = self.consolidation_policy
            doc["spec"]["disruption"]["consolidateAfter"] = self.consolidate_after
            pools.append(doc)
        return pools

    def get(self, path: str) -> Any:
        return self.plane.get(path)

    def node_pool(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.plane.get(f"/apis/karpenter.sh/v1/nodepools/{name}")
        return found

    def node_claims(self, pool: str | None = None) -> list[dict[str, Any]]:
        """Karpenter's NodeClaims (of one NodePool)."""
        selector = f"?labelSelector={NODEPOOL}%3D{pool}" if pool else ""
        items: list[dict[str, Any]] = self.plane.request("GET", f"/apis/karpenter.sh/v1/nodeclaims{selector}")["items"]
        return items

    def nodes(self, pool: str | None = None) -> list[dict[str, Any]]:
        """Karpenter's nodes (of one NodePool), those being deleted included."""
        selector = f"{NODEPOOL}%3D{pool}" if pool else NODEPOOL
        items: list[dict[str, Any]] = self.plane.request("GET", f"/api/v1/nodes?labelSelector={selector}")["items"]
        return items

    def node(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.plane.get(f"/api/v1/nodes/{name}")
        return found

    @staticmethod
    def condition(obj: Mapping[str, Any] | None, kind: str) -> str | None:
        """The status (`"True"`, `"False"`, `"Unknown"`) of an object's condition `kind`, None without it."""
        for found in ((obj or {}).get("status") or {}).get("conditions") or []:
            if found.get("type") == kind:
                status: str = found.get("status", "")
                return status
        return None

    def wait_node_pool(self, name: str, condition: str = "Ready", status: str = "True", timeout: float = 60) -> None:
        """Until NodePool `name`'s condition has this status."""
        wait_until(
            lambda: self._alive() and self.condition(self.node_pool(name), condition) == status,
            timeout,
            f"NodePool {name} {condition}={status}",
        )

    def wait_node_claims(
        self,
        predicate: Callable[[list[dict[str, Any]]], Any],
        timeout: float = 120,
        what: str = "NodeClaims",
        pool: str | None = None,
    ) -> Any:
        """`predicate(NodeClaims)`'s first truthy value (e.g. `lambda claims: len(claims) == 2`)."""
        return wait_until(lambda: self._alive() and predicate(self.node_claims(pool)), timeout, what, every=0.5)

    def wait_nodes(
        self,
        predicate: Callable[[list[dict[str, Any]]], Any],
        timeout: float = 120,
        what: str = "Karpenter's nodes",
        pool: str | None = None,
    ) -> Any:
        """`predicate(Karpenter's nodes)`'s first truthy value (e.g. `lambda nodes: not nodes`)."""
        return wait_until(lambda: self._alive() and predicate(self.nodes(pool)), timeout, what, every=0.5)

    def wait_node_gone(self, name: str, timeout: float = 180) -> None:
        """Until Node `name` and its NodeClaim (the one whose `status.nodeName` it is) are deleted."""
        wait_until(
            lambda: self._alive() and self.node(name) is None and not any(
                c["status"].get("nodeName") == name for c in self.node_claims()
            ),
            timeout,
            f"node {name} and its NodeClaim gone",
            every=0.5,
        )  # fmt: skip

    def ready(self, node: Mapping[str, Any]) -> bool:
        """Whether a node is Ready and untainted by its start-up (Karpenter's `unregistered`, the API server's
        `not-ready`)."""
        taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
        starting = {"karpenter.sh/unregistered", "node.kubernetes.io/not-ready"}
        return self.condition(node, "Ready") == "True" and not taints & starting

    # metrics and logs --------------------------------------------------------------------------------------------

    def metrics(self) -> str:
        """Karpenter's metrics endpoint, Prometheus text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            text: str = answer.read().decode()
        return text

    def metric(self, name: str, **labels: str) -> float:
        """The sum of metric `name`'s samples whose labels include these (0 when there is none), e.g.
        `metric("karpenter_nodeclaims_disrupted_total", reason="empty")`."""
        return sum(
            value
            for found, value in metric_samples(self.metrics(), name)
            if all(found.get(k) == v for k, v in labels.items())
        )

    def log(self, name: str = "karpenter") -> str:
        """One process's log (`karpenter`, `kwok`, `kube-controller-manager`, `kube-scheduler`)."""
        return self.processes[name].text()

    def karpenter_events(self, message: str) -> list[dict[str, Any]]:
        """Karpenter's JSON log lines whose `message` is this (`"created nodeclaim"`, `"disrupting node(s)"`...)."""
        found = []
        for line in self.log("karpenter").splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("message") == message:
                    found.append(entry)
        return found

    # workloads ---------------------------------------------------------------------------------------------------

    def pod(
        self,
        name: str,
        namespace: str,
        requests: Mapping[str, str],
        *,
        run_for: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """A bare pod asking for `requests`, running `run_for` (a Go duration) once started, or until deleted."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _metadata(name, namespace, labels, _run_for(run_for, annotations)),
            "spec": pod_spec(requests, **spec),
        }
        created: dict[str, Any] = self.plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        return created

    def job(
        self,
        name: str,
        namespace: str,
        requests: Mapping[str, str],
        *,
        run_for: str,
        completions: int = 1,
        parallelism: int = 1,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """A Job whose pods each run `run_for` and succeed; the Job controller makes `completions` of them,
        `parallelism` at a time."""
        template = {
            "metadata": {"labels": dict(labels or {}), "annotations": _run_for(run_for, annotations)},
            "spec": pod_spec(requests, **spec),
        }
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _metadata(name, namespace, labels, None),
            "spec": {
                "completions": completions,
                "parallelism": parallelism,
                "backoffLimit": 0,
                "template": template,
            },
        }
        created: dict[str, Any] = self.plane.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
        return created

    def deployment(
        self,
        name: str,
        namespace: str,
        requests: Mapping[str, str],
        *,
        replicas: int = 1,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """A Deployment of `replicas` pods asking for `requests`, labelled `app: <name>` (and `labels`). Its pods run
        until deleted (restartPolicy Always: a kubelet would restart an exited container in place); scale it with
        `scale`."""
        selector = {"app": name}
        template = {
            "metadata": {"labels": {**selector, **dict(labels or {})}, "annotations": dict(annotations or {})},
            "spec": pod_spec(requests, restart_policy="Always", **spec),
        }
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(name, namespace, labels, None),
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector}, "template": template},
        }
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        created: dict[str, Any] = self.plane.request("POST", path, body)
        return created

    def scale(self, kind: str, name: str, namespace: str, replicas: int) -> None:
        """Set a Deployment's (`deployments`) or a StatefulSet's (`statefulsets`) replicas."""
        self.plane.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{namespace}/{kind}/{name}/scale",
            {"spec": {"replicas": replicas}},
            "application/merge-patch+json",
        )

    def pod_disruption_budget(
        self, name: str, namespace: str, selector: Mapping[str, str], *, min_available: int | str = 1
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
        }
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        created: dict[str, Any] = self.plane.request("POST", path, body)
        return created

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        """The namespace's pods, of a label selector (`app=infer`, `job-name=train`) when given."""
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        items: list[dict[str, Any]] = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
        return items

    def wait_pod(
        self, namespace: str, name: str, predicate: Callable[[dict[str, Any]], Any], what: str, timeout: float = 120
    ) -> dict[str, Any]:
        """The pod once `predicate(pod)` holds."""
        found: dict[str, Any] = wait_until(
            lambda: self._alive() and (p := self.plane.pod(namespace, name)) is not None and predicate(p) and p,
            timeout,
            f"{namespace}/{name} {what}",
            every=0.5,
        )
        return found

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: float = 120) -> dict[str, Any]:
        return self.wait_pod(namespace, name, lambda p: p.get("status", {}).get("phase") == phase, phase, timeout)
