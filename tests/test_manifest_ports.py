"""Probes, ports and Services of the shipped manifests against what each container really listens on.

The kubelet runs probes from the node's network namespace against the pod IP: `httpGet.host: 127.0.0.1` probes
the node's own loopback, and a port the container binds on loopback only is unreachable, so such a probe never
passes and the container restarts in a loop. What a gpupack container listens on is read from its arguments with
the real command-line parser, so a manifest and the code cannot disagree unnoticed.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from gpupack.cli import build_parser
from gpupack.core.server import is_loopback
from tests.conftest import ROOT

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
GPUPACK_PATHS = {"/healthz", "/readyz", "/metrics"}
SCHEDULER_PATHS = {"/healthz", "/livez", "/readyz", "/metrics"}


@dataclass(frozen=True)
class Listener:
    """A port a container serves: where it binds, whether over TLS, and the paths a probe may use there."""

    host: str
    port: int
    tls: bool
    paths: frozenset[str]

    @property
    def on_pod_ip(self) -> bool:
        return not is_loopback(self.host)


def _flag(args: list[str], name: str, default: str) -> str:
    for arg in args:
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return default


def listeners(container: dict[str, Any]) -> list[Listener]:
    """What the container listens on, from its command line."""
    args = [*container.get("command", []), *container.get("args", [])]
    if "kube-scheduler" in args[:1]:
        host = _flag(args, "--bind-address", "0.0.0.0")
        return [Listener(host, int(_flag(args, "--secure-port", "10259")), True, frozenset(SCHEDULER_PATHS))]
    parsed = build_parser().parse_args(args)
    tls = bool(getattr(parsed, "cert_file", None))
    verbs = {"/mutate", "/mutate/opted-in-namespace"} if parsed.command == "webhook" else {"/filter", "/prioritize"}
    found = [Listener(parsed.host, parsed.port, tls, frozenset(GPUPACK_PATHS | verbs))]
    if parsed.health_port is not None:
        found.append(Listener(parsed.health_host, parsed.health_port, False, frozenset(GPUPACK_PATHS)))
    return found


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests")], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]


def _declared(container: dict[str, Any], port: int | str) -> int | None:
    """The container port a probe or Service names (by name or number), None when the container declares none."""
    for declared in container.get("ports", []):
        if port in (declared.get("name"), declared["containerPort"]):
            return int(declared["containerPort"])
    return None


def problems_of(objects: list[dict[str, Any]]) -> list[str]:
    """Every probe, container port and Service port that no container serves where it is reached."""
    problems: list[str] = []
    pods: dict[str, tuple[dict[str, str], dict[str, Any]]] = {}
    for workload in workloads(objects):
        name = workload["metadata"]["name"]
        template = workload["spec"]["template"]
        pods[name] = (template["metadata"].get("labels", {}), template["spec"])
        host_network = bool(template["spec"].get("hostNetwork"))
        for container in template["spec"]["containers"]:
            where = f"{name}/{container['name']}"
            served = {listener.port: listener for listener in listeners(container)}
            for declared in container.get("ports", []):
                listener = served.get(declared["containerPort"])
                if listener is None:
                    problems.append(f"{where}: declares port {declared['containerPort']}, which it does not serve")
                elif not listener.on_pod_ip and not host_network:
                    problems.append(f"{where}: declares port {listener.port}, bound on loopback only")
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                get = (container.get(kind) or {}).get("httpGet")
                if get is None:
                    continue
                if get.get("host") in LOOPBACK and not host_network:
                    problems.append(f"{where}: {kind} probes host {get['host']}, the node's loopback, not the pod")
                port = get["port"] if isinstance(get["port"], int) else _declared(container, get["port"])
                listener = served.get(port) if port is not None else None
                if listener is None:
                    problems.append(f"{where}: {kind} names port {get['port']}, which no listener of it serves")
                    continue
                if not listener.on_pod_ip and not host_network:
                    problems.append(f"{where}: {kind} port {port} is bound on loopback: the kubelet cannot reach it")
                if (get.get("scheme", "HTTP") == "HTTPS") != listener.tls:
                    problems.append(f"{where}: {kind} uses {get.get('scheme', 'HTTP')} on a port that does not")
                if get["path"] not in listener.paths:
                    problems.append(f"{where}: {kind} path {get['path']} is not served on port {port}")
    for service in [o for o in objects if o["kind"] == "Service"]:
        selector = service["spec"].get("selector", {})
        selected = [spec for labels, spec in pods.values() if selector and selector.items() <= labels.items()]
        if not selected:
            problems.append(f"Service {service['metadata']['name']}: selects no pod")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            if not any(_declared(c, target) for spec in selected for c in spec["containers"]):
                problems.append(f"Service {service['metadata']['name']}: targetPort {target} is no container's port")
    return problems


def test_every_probe_port_and_service_reaches_a_listener(objects: list[dict[str, Any]]) -> None:
    assert problems_of(objects) == []


def test_the_checks_catch_a_loopback_probe_and_a_port_nobody_serves(objects: list[dict[str, Any]]) -> None:
    """The manifests of before this check: the extender probed 127.0.0.1:8888 without hostNetwork."""
    broken = yaml.safe_load(yaml.safe_dump(objects))
    (scheduler,) = [w for w in workloads(broken) if w["metadata"]["name"] == "gpupack-scheduler"]
    extender = next(c for c in scheduler["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    extender["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": 8888, "host": "127.0.0.1"}}
    (service,) = [o for o in broken if o["kind"] == "Service" and o["metadata"]["name"] == "gpupack-webhook"]
    service["spec"]["ports"][0]["targetPort"] = "webhook"
    found = problems_of(broken)
    assert any("probes host 127.0.0.1" in p for p in found)
    assert any("port 8888 is bound on loopback" in p for p in found)
    assert any("targetPort webhook" in p for p in found)


def test_the_extenders_verbs_are_reachable_only_from_its_pod(objects: list[dict[str, Any]]) -> None:
    (scheduler,) = [w for w in workloads(objects) if w["metadata"]["name"] == "gpupack-scheduler"]
    extender = next(c for c in scheduler["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    verbs, health = listeners(extender)
    assert "/filter" in verbs.paths and not verbs.on_pod_ip and not verbs.tls
    assert health.on_pod_ip and "/filter" not in health.paths
    assert not scheduler["spec"]["template"]["spec"].get("hostNetwork")


def test_the_webhook_serves_admission_and_metrics_on_named_ports(objects: list[dict[str, Any]]) -> None:
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "gpupack-webhook"]
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"https": "https", "metrics": "metrics"}
    (webhook,) = [w for w in workloads(objects) if w["metadata"]["name"] == "gpupack-webhook"]
    (container,) = webhook["spec"]["template"]["spec"]["containers"]
    https, metrics = listeners(container)
    assert https.tls and https.on_pod_ip and not metrics.tls and metrics.on_pod_ip


def test_the_second_scheduler_has_the_bindings_of_the_multiple_schedulers_guide(objects: list[dict[str, Any]]) -> None:
    """Kubernetes' "Configure Multiple Schedulers": system:kube-scheduler and system:volume-scheduler cluster-wide,
    and extension-apiserver-authentication-reader in kube-system for the secure port's delegated authentication."""
    subject = {"kind": "ServiceAccount", "name": "gpupack-scheduler", "namespace": "gpupack-system"}
    bound = {
        (o["kind"], o["metadata"].get("namespace"), o["roleRef"]["kind"], o["roleRef"]["name"])
        for o in objects
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in o["subjects"]
    }
    assert {
        ("ClusterRoleBinding", None, "ClusterRole", "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "ClusterRole", "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "Role", "extension-apiserver-authentication-reader"),
    } <= bound
