"""The shipped manifests, applied to a real API server, with their pods run as local processes.

There is no kubelet, so this module does for gpupack's Deployments what one would, and nothing more: it runs each
container's command and args as rendered (the image's `gpupack` entry point is this checkout's), with
- the pod's volumes: ConfigMaps and Secrets read from the API and written to a folder per volume (and written
  again by `sync_volumes`, as the kubelet refreshes a mounted ConfigMap);
- the pod's service account: `--in-cluster` becomes a kubeconfig holding a token the API server issued for that
  ServiceAccount, so every call is judged by the shipped RBAC;
- its ports: every containerPort gets a free port of this machine (the pods would each have their own loopback),
  and the args naming a port are rewritten to it;
- its probes: `probe()` asks the path and port the manifest names, as the kubelet does;
- its Service: an EndpointSlice (and Endpoints) pointing at this machine's address and the mapped target port.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpupack.testing.control_plane import ROOT, ControlPlane, Process, host_address, scheduler_config
from gpupack.testing.net import free_port

GPUPACK = [sys.executable, "-m", "gpupack"]
"""The image's entry point (`ENTRYPOINT ["gpupack"]`), from this checkout."""


@dataclass
class RunningPod:
    """One Deployment's pod, as processes."""

    deployment: str
    namespace: str
    spec: dict[str, Any]
    ports: dict[str, int] = field(default_factory=dict)
    """containerPort name (and number, as a string) -> the port it runs on here."""
    processes: dict[str, Process] = field(default_factory=dict)
    """Container name -> its process."""
    volumes: dict[str, Path] = field(default_factory=dict)

    def container(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(c for c in self.spec["containers"] if c["name"] == name)
        return found

    def probe(self, container: str, kind: str = "readinessProbe") -> int:
        """The HTTP status the container's probe gets (0 when nothing answers)."""
        probe = self.container(container)[kind]["httpGet"]
        port = self.ports[str(probe["port"])]
        scheme = probe.get("scheme", "HTTP").lower()
        context = ssl._create_unverified_context() if scheme == "https" else None  # the kubelet does not verify
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}{probe['path']}", context=context, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0


class Deployment:
    """Applies rendered manifests and runs gpupack's pods."""

    def __init__(self, plane: ControlPlane, objects: Iterable[Mapping[str, Any]], workdir: Path) -> None:
        self.plane = plane
        self.objects = [dict(o) for o in objects]
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.pods: dict[str, RunningPod] = {}

    def find(self, kind: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)
        return found

    # volumes -----------------------------------------------------------------------------------------------------

    def _volume(self, namespace: str, volume: Mapping[str, Any], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            found = self.plane.get(f"/api/v1/namespaces/{namespace}/configmaps/{volume['configMap']['name']}")
            files = {k: v.encode() for k, v in (found or {}).get("data", {}).items()}
        elif "secret" in volume:
            found = self.plane.get(f"/api/v1/namespaces/{namespace}/secrets/{volume['secret']['secretName']}")
            files = {k: base64.b64decode(v) for k, v in (found or {}).get("data", {}).items()}
        else:
            raise AssertionError(f"volume kind not emulated: {volume}")
        if found is None:
            raise AssertionError(f"the pod's volume {volume['name']} names an object that does not exist")
        for name, data in files.items():
            path = folder / name
            if not path.exists() or path.read_bytes() != data:
                tmp = folder / f".{name}.tmp"
                tmp.write_bytes(data)
                tmp.replace(path)

    def sync_volumes(self) -> None:
        """Write the mounted ConfigMaps and Secrets again from the API (the kubelet's periodic refresh)."""
        for pod in self.pods.values():
            for volume in pod.spec.get("volumes", []):
                self._volume(pod.namespace, volume, pod.volumes[volume["name"]])

    # running -----------------------------------------------------------------------------------------------------

    def run(
        self, deployment: str, extra_env: Mapping[str, str] | None = None, services: Mapping[str, str] | None = None
    ) -> RunningPod:
        """Start every container of the Deployment's pod template. `services` maps a URL the args name (a Service
        of the cluster, `http://prometheus-operated.monitoring.svc:9090`) to where it is here (what DNS and the
        Service's ClusterIP would resolve)."""
        self.services = dict(services or {})
        source = self.find("Deployment", deployment)
        namespace = source["metadata"].get("namespace", "default")
        spec = source["spec"]["template"]["spec"]
        pod = RunningPod(deployment, namespace, spec)
        base = self.workdir / deployment
        for volume in spec.get("volumes", []):
            pod.volumes[volume["name"]] = base / "volumes" / volume["name"]
            self._volume(namespace, volume, pod.volumes[volume["name"]])
        for container in spec["containers"]:
            for port in container.get("ports", []):
                mapped = free_port()
                pod.ports[str(port["containerPort"])] = mapped
                if "name" in port:
                    pod.ports[port["name"]] = mapped
        kubeconfig = self.plane.service_account_kubeconfig(namespace, spec.get("serviceAccountName", "default"))
        self.pods[deployment] = pod
        for container in spec["containers"]:
            argv = self._argv(pod, container, kubeconfig, base)
            name = f"{deployment}-{container['name']}"
            pod.processes[container["name"]] = self.plane.spawn(name, argv, extra_env)
        return pod

    def _mounted(self, pod: RunningPod, container: Mapping[str, Any], text: str) -> str:
        """`text` with the container's mount paths replaced by the volumes' folders here."""
        for mount in sorted(container.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
            text = text.replace(mount["mountPath"], str(pod.volumes[mount["name"]]))
        return text

    def _argv(self, pod: RunningPod, container: Mapping[str, Any], kubeconfig: Path, base: Path) -> list[str]:
        command = list(container.get("command") or [])
        args = [self._mounted(pod, container, a) for a in container.get("args") or []]
        for url, here in getattr(self, "services", {}).items():
            args = [a.replace(url, here) for a in args]
        if command and command[0] == "kube-scheduler":
            return self._scheduler_argv(pod, container, command, kubeconfig, base)
        if command:
            raise AssertionError(f"container {container['name']}: command {command} not emulated")
        out = []
        for arg in args:
            if arg == "--in-cluster":
                out.append(f"--kubeconfig={kubeconfig}")
                continue
            match = re.fullmatch(r"--(port|health-port)=(\d+)", arg)
            out.append(f"--{match.group(1)}={pod.ports.setdefault(match.group(2), free_port())}" if match else arg)
        if not any(a.startswith("--kubeconfig=") for a in out) and "extender" in out[:1]:
            out.append(f"--kubeconfig={kubeconfig}")  # the extender's default is in-cluster: the pod's account
        return [*GPUPACK, *out]

    def _scheduler_argv(
        self, pod: RunningPod, container: Mapping[str, Any], command: list[str], kubeconfig: Path, base: Path
    ) -> list[str]:
        out = [str(self.plane.tools.kube_scheduler)]
        extender_port = None  # the extender sidecar's verb port (its --port arg, mapped): the config's urlPrefix
        for c in pod.spec["containers"]:
            for a in c.get("args") or []:
                if match := re.fullmatch(r"--port=(\d+)", a):
                    extender_port = pod.ports.setdefault(match.group(1), free_port())
        for arg in command[1:]:
            if arg.startswith("--config="):
                shipped = Path(self._mounted(pod, container, arg.removeprefix("--config=")))
                config = scheduler_config(yaml.safe_load(shipped.read_text()), kubeconfig, extender_port)
                path = base / "scheduler-config.yaml"
                path.write_text(yaml.safe_dump(config))
                out.append(f"--config={path}")
            else:
                out.append(arg)
        secure = pod.ports.get("sched-https") or free_port()
        return [*out, f"--secure-port={secure}", "--bind-address=127.0.0.1"]

    def stop(self, deployment: str, container: str | None = None) -> None:
        pod = self.pods[deployment]
        for name, process in pod.processes.items():
            if container in (None, name):
                process.stop()

    def endpoints(self, service: str, deployment: str) -> None:
        """The Service's endpoints: this machine's address and the pod's mapped target ports (the EndpointSlice
        controller's job)."""
        source = self.find("Service", service)
        namespace = source["metadata"].get("namespace", "default")
        pod = self.pods[deployment]
        address = host_address()
        ports = [
            {"name": p["name"], "port": pod.ports[str(p.get("targetPort", p["port"]))], "protocol": "TCP"}
            for p in source["spec"]["ports"]
        ]
        slice_ = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-test",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": ports,
        }
        endpoints = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": service, "namespace": namespace},
            "subsets": [{"addresses": [{"ip": address}], "ports": ports}],
        }
        self.plane.apply([slice_, endpoints])


def install_kustomize(plane: ControlPlane, work: Path, policy: str) -> Deployment:
    """The README's Deploy steps with kustomize (the namespace, `gpupack certs`, the TLS Secret, `kubectl apply -k
    manifests/`, the caBundle patch), then the policy ConfigMap set to `policy` as an admin edits it. Returns the
    rendered objects, ready to run their pods."""
    namespace = "gpupack-system"
    plane.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"))
    certs = work / "certs"
    issued = subprocess.run(
        [*GPUPACK, "certs", "--out", str(certs), "--service", "gpupack-webhook", "--namespace", namespace],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    plane.kubectl(
        "-n", namespace, "create", "secret", "tls", "gpupack-webhook-tls",
        f"--cert={certs / 'tls.crt'}", f"--key={certs / 'tls.key'}",
    )  # fmt: skip
    plane.kubectl("apply", "-k", str(ROOT / "manifests"))
    bundle = issued.stdout.strip()
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle} for i in (0, 1)]
    plane.kubectl("patch", "mutatingwebhookconfiguration", "gpupack", "--type=json", "-p", json.dumps(patch))
    found = plane.get(f"/api/v1/namespaces/{namespace}/configmaps/gpupack-policy")
    found["data"]["policy.yaml"] = policy
    plane.request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/gpupack-policy", found)
    rendered = plane.kubectl("kustomize", str(ROOT / "manifests")).stdout
    return Deployment(plane, [d for d in yaml.safe_load_all(rendered) if d], work / "pods")
