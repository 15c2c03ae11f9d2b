"""Deployed as shipped, on a real control plane: the README's Deploy steps with kustomize, the services running with
their service accounts' tokens, a default kube-scheduler beside the gpupack one, and labelled pods that reach the
gpupack scheduler and its extender while its Lease is live. Any RBAC refusal in a log fails the test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupack.testing.control_plane import ControlPlane, forbidden_lines, wait_until
from gpupack.testing.deployed import Deployment
from tests.audit_log import audit_of, audited_plane, refusals

ROOT = Path(__file__).resolve().parents[1]
NS = "gpupack-system"
TEAM = "ml-serving"
A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.strategy": "mixed",
}
A100_MIG = {"nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}
SHIPPED_POLICY = (ROOT / "manifests" / "policy.yaml").read_text(encoding="utf-8")
ENFORCE = SHIPPED_POLICY.replace("mode: audit\n", "mode: enforce\n")
"""The shipped policy, enforcing: the rollout's second step changes the mode and nothing else, so whatever else
the shipped policy says (its scheduler Lease, say) is what these tests run with."""
assert ENFORCE.count("mode: enforce\n") == 1, "the shipped policy no longer says `mode: audit`"
PODS = (("gpupack-webhook", "webhook"), ("gpupack-scheduler", "extender"))
"""gpupack's (Deployment, container) pairs with probes, in the second scheduler's mode."""
pytestmark = pytest.mark.timeout(600)


def gpupack(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "gpupack", *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def readme_certs(plane: ControlPlane, work: Path) -> str:
    """The README's certificate step: `gpupack certs` and the webhook's TLS Secret in gpupack-system (which must
    exist); the caBundle it printed."""
    certs = work / "certs"
    bundle = gpupack("certs", "--out", str(certs), "--service", "gpupack-webhook", "--namespace", NS, cwd=work)
    plane.kubectl(
        "-n",
        NS,
        "create",
        "secret",
        "tls",
        "gpupack-webhook-tls",
        f"--cert={certs / 'tls.crt'}",
        f"--key={certs / 'tls.key'}",
    )
    return bundle.strip()


def gpu_cluster(plane: ControlPlane) -> None:
    """GPU nodes, as GPU Feature Discovery and the device plugin report them, a CPU node, and the team's namespace
    (opted in)."""
    for i in (1, 2):
        plane.node(f"a100-{i}", {"cpu": "96", "memory": "1000Gi", **A100_MIG}, A100)
    plane.node(
        "h100-1",
        {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8"},
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
    )
    plane.node("cpu-1", {"cpu": "32", "memory": "128Gi"})
    plane.namespace(TEAM, {"gpupack.io/enabled": "true"})


def run_gpupack(plane: ControlPlane, deployment: Deployment) -> None:
    """The pods of gpupack's two Deployments and the cluster's own scheduler; returns once the webhook and the
    extender are ready and the gpupack scheduler holds its Lease."""
    deployment.run("gpupack-webhook")
    deployment.endpoints("gpupack-webhook", "gpupack-webhook")
    deployment.run("gpupack-scheduler")
    default_scheduler(plane)
    wait_until(lambda: deployment.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")
    wait_until(lambda: deployment.pods["gpupack-scheduler"].probe("extender") == 200, 60, "extender ready")
    wait_until(
        lambda: (
            (plane.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpupack-scheduler") or {})
            .get("spec", {})
            .get("holderIdentity")
        ),
        60,
        "gpupack-scheduler leader",
    )


def default_scheduler(plane: ControlPlane, config: Path | None = None) -> None:
    """The cluster's own kube-scheduler (with `config`, a KubeSchedulerConfiguration file, else its defaults)."""
    kubeconfig = plane.client_kubeconfig("system:kube-scheduler")
    plane.spawn(
        "default-scheduler",
        [
            str(plane.tools.kube_scheduler),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            *([f"--config={config}"] if config else ["--leader-elect=false"]),
            "--secure-port=0",
        ],
    )


def set_policy(plane: ControlPlane, text: str) -> None:
    """Replace the policy ConfigMap's file (the pods' volumes read it)."""
    policy = plane.get(f"/api/v1/namespaces/{NS}/configmaps/gpupack-policy")
    policy["data"]["policy.yaml"] = text
    plane.request("PUT", f"/api/v1/namespaces/{NS}/configmaps/gpupack-policy", policy)


def readme_deploy(plane: ControlPlane, work: Path) -> Deployment:
    """The README's Deploy section with kustomize, step by step, then the rollout's second step (enforce, once
    audit looked right; the pods' volume reads it). The pods are not started: `run_gpupack` does that."""
    plane.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"))
    bundle = readme_certs(plane, work)
    plane.kubectl("apply", "-k", str(ROOT / "manifests"))
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle} for i in (0, 1)]
    plane.kubectl("patch", "mutatingwebhookconfiguration", "gpupack", "--type=json", "-p", json.dumps(patch))
    rendered = plane.kubectl("kustomize", str(ROOT / "manifests")).stdout
    deployment = Deployment(plane, [d for d in yaml.safe_load_all(rendered) if d], work / "pods")
    set_policy(plane, ENFORCE)
    return deployment


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Deployment]]:
    work = tmp_path_factory.mktemp("deploy")
    plane = audited_plane(work, "Metadata").start()
    try:
        deployment = readme_deploy(plane, work)
        gpu_cluster(plane)
        run_gpupack(plane, deployment)
        yield plane, deployment
    finally:
        plane.stop()


def labelled_pod(name: str, labels: dict[str, str], namespace: str = TEAM) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {f"gpupack.io/{k}": v for k, v in labels.items()}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/model:1"}]},
    }


def metric(pod: Any, container: str, name: str) -> float:
    """A sample's value from the container's /metrics (on its health port), summed over label sets."""
    import urllib.request

    port = pod.ports["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def no_refusals(plane: ControlPlane) -> None:
    """No gpupack process and no scheduler was refused a request: the shipped RBAC covers what they do. Both
    sides are read: the processes' logs, and the API server's audit log of every service account's request
    (a refusal a process retries in silence shows only there)."""
    refused = {name: forbidden_lines(text) for name, text in plane.logs().items() if name != "kube-apiserver"}
    assert all(not lines for lines in refused.values()), refused
    audited = refusals(audit_of(plane).requests())
    assert not audited, audited


def probes_answer(deployment: Deployment, pods: tuple[tuple[str, str], ...] = PODS) -> None:
    """Every readiness and liveness probe of these (Deployment, container) pairs gets 200."""
    for name, container in pods:
        for kind in ("readinessProbe", "livenessProbe"):
            assert deployment.pods[name].probe(container, kind) == 200, (name, container, kind)


def packed_by_the_extender(
    plane: ControlPlane, deployment: Deployment, prefix: str, scheduler_name: str = "gpupack-scheduler"
) -> None:
    """Three labelled inference pods are mutated (a MIG slice, gpupack's priority), go to `scheduler_name`, and
    are packed by the extender's score onto one MIG node."""
    extender = deployment.pods.get("gpupack-scheduler") or deployment.pods["gpupack-extender"]
    before = metric(extender, "extender", "gpupack_extender_request_duration_seconds_count")
    names = [f"{prefix}-{i}" for i in range(3)]
    for name in names:
        plane.apply([labelled_pod(name, {"workload": "inference", "gpu-memory": "4Gi"})])
    bound = [plane.scheduled(TEAM, name, 60) for name in names]
    for pod in bound:
        assert pod["spec"]["schedulerName"] == scheduler_name
        assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.5gb"] == "1"
        assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == ("gpupack-inference", 100000)
    # Packed by the extender's score: all three on one MIG node (kube-scheduler's own LeastAllocated would spread
    # them over both), the other left empty for the autoscaler.
    assert len({p["spec"]["nodeName"] for p in bound}) == 1
    after = metric(extender, "extender", "gpupack_extender_request_duration_seconds_count")
    assert after - before >= 6  # filter + prioritize
    no_refusals(plane)


def test_every_probe_of_the_shipped_pods_answers(cluster: tuple[ControlPlane, Deployment]) -> None:
    probes_answer(cluster[1])


def test_labelled_pods_are_mutated_routed_and_packed_through_the_extender(
    cluster: tuple[ControlPlane, Deployment],
) -> None:
    time.sleep(6)  # the webhook reads the Lease every 5 s: it has seen the leader by now
    packed_by_the_extender(*cluster, "embed")


def test_the_default_scheduler_places_pods_that_did_not_opt_in(cluster: tuple[ControlPlane, Deployment]) -> None:
    plane, _ = cluster
    plane.namespace("plain")
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": "plain"},
                "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]},
            }
        ]
    )
    pod = plane.scheduled("plain", "web", 60)
    assert pod["spec"]["schedulerName"] == "default-scheduler" and "gpupack.io/class" not in pod["metadata"].get(
        "annotations", {}
    )


def test_gpu_pods_still_schedule_with_the_extender_down(cluster: tuple[ControlPlane, Deployment]) -> None:
    # `ignorable: true`: kube-scheduler goes on without the extender (its own filters and scores).
    plane, deployment = cluster
    deployment.stop("gpupack-scheduler", "extender")
    plane.apply([labelled_pod("train-0", {"workload": "training", "gpus": "1"})])
    pod = plane.scheduled(TEAM, "train-0", 60)
    assert pod["spec"]["schedulerName"] == "gpupack-scheduler" and pod["spec"]["nodeName"] == "h100-1"


def test_with_the_gpupack_scheduler_gone_new_pods_go_to_the_default_scheduler_with_a_warning(
    cluster: tuple[ControlPlane, Deployment],
) -> None:
    plane, deployment = cluster
    deployment.stop("gpupack-scheduler")
    # Its Lease expires (15 s) and the webhook's grace passes (10 s); the webhook reads it every 5 s.
    time.sleep(32)
    created = plane.apply([labelled_pod("embed-late", {"workload": "inference", "gpu-memory": "4Gi"})])
    assert "has no live leader" in created.stderr and "left on default-scheduler" in created.stderr
    pod = plane.scheduled(TEAM, "embed-late", 60)
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.5gb"] == "1"  # still sized
    no_refusals(plane)
