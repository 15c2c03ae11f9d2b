"""`gpupack report --kubeconfig` reading a real kube-apiserver as a ServiceAccount holding exactly the list
permissions the report needs (`gpupack.core.kube.CLUSTER_LISTS`, which the README spells): it sees what the API
holds, the same findings as from `kubectl get nodes,pods,pdb,daemonsets,events -A -o json`, and without one of the
permissions it refuses in one line naming the resource.

A real kube-scheduler preempts a Job's GPU pod for a higher-priority one, so the `Preempted` Event the report
lists is the one kube-scheduler writes, and its `/metrics` show the two families the report asks Prometheus for."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupack.core.kube import CLUSTER_LISTS, DRA_CLUSTER_LISTS, resource_name
from gpupack.report.promql import PREEMPTION_ATTEMPTS, PREEMPTION_VICTIMS
from gpupack.testing.control_plane import ROOT, ControlPlane, Kubelet, env_without_proxy, wait_until
from gpupack.testing.dra import gpu_slice
from gpupack.testing.net import free_port
from gpupack.testing.scheduler import VICTIM_BUCKETS
from tests.audit_log import AuditLog, audited_plane, refusals, service_account_user, verbs
from tests.test_report_cli import write_log

pytestmark = pytest.mark.timeout(600)

NAMESPACE = "gpupack-system"
READER = "gpupack-report"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
MERGE = "application/merge-patch+json"


def cluster_role(
    name: str, lists: tuple[tuple[str, str, str], ...] = CLUSTER_LISTS + DRA_CLUSTER_LISTS
) -> list[dict[str, Any]]:
    """A ServiceAccount `name` with `list` on `lists`' resources, cluster-wide: what an admin gives the report."""
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": ["list"]} for _, group, resource in lists]
    meta = {"name": name}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    ]


def owned(kind: str, name: str) -> dict[str, Any]:
    """An ownerReference to a controller (there is no garbage collector here to mind that it does not exist)."""
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}


def pod(
    name: str,
    node: str | None,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    **spec: Any,
) -> dict[str, Any]:
    """A pod bound to `node` (None: left to the scheduler) with CPU and memory requests, and `gpus` whole GPUs."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    container = {"name": "main", "image": "registry.example/app:1", "resources": resources}
    body = {"containers": [container], **spec} | ({"nodeName": node} if node else {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


@dataclass
class Cluster:
    plane: ControlPlane
    audit: AuditLog
    kubeconfig: Path
    logs: list[str]
    work: Path
    scheduler_metrics: str
    """kube-scheduler's `/metrics` once it has preempted."""


def running(plane: ControlPlane, namespace: str, body: dict[str, Any]) -> None:
    """Create the pod and report it Running, as its kubelet would."""
    plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    path = f"/api/v1/namespaces/{namespace}/pods/{body['metadata']['name']}/status"
    plane.request("PATCH", path, {"status": {"phase": "Running"}}, MERGE)


JOB = {**owned("Job", "etl"), "apiVersion": "batch/v1"}


def preempt(plane: ControlPlane, work: Path) -> str:
    """kube-scheduler (default plugins) gives the one GPU of node `busy`, held by the Job etl's pod, to a pod of
    higher priority: it deletes the Job's pod (the kubelet stand-in removes it) and writes the Preempted Event.
    Then the Job's replacement pod waits for a GPU, as the Job controller would make it. Returns the scheduler's
    `/metrics`."""
    classes = [("low", 10), ("high", 1000)]
    plane.apply(
        [
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
            for n, v in classes
        ]
    )
    plane.node("busy", {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "1"}, {**A100, "pool": "busy"})
    victim = pod("etl-x7k2p", "busy", JOB, gpus=1, priorityClassName="low")
    victim["metadata"]["generateName"] = "etl-"
    running(plane, "ml", victim)
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(plane.admin_kubeconfig)},
    }
    path = work / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [str(plane.tools.kube_scheduler), f"--config={path}", f"--secure-port={port}", "--bind-address=127.0.0.1"]
    plane.spawn("kube-scheduler", [*argv, "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"])
    with Kubelet(plane):
        preemptor = pod("serve-0", None, gpus=1, priorityClassName="high", nodeSelector={"pool": "busy"})
        plane.request("POST", "/api/v1/namespaces/ml/pods", preemptor)
        wait_until(lambda: any(e["reason"] == "Preempted" for e in plane.events("ml")), 60, "the Preempted Event")
        wait_until(lambda: plane.pod("ml", "etl-x7k2p") is None, 30, "the victim removed")
    plane.scheduled("ml", "serve-0", 60)
    replacement = pod("etl-b5c6d", None, JOB, gpus=1, priorityClassName="low", nodeSelector={"pool": "busy"})
    replacement["metadata"]["generateName"] = "etl-"
    plane.request("POST", "/api/v1/namespaces/ml/pods", replacement)
    context = ssl._create_unverified_context()  # its self-signed serving certificate
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as answer:
        return str(answer.read().decode())


def claimed(plane: ControlPlane) -> None:
    """A DRA node whose GPU `gpu-0` a pod holds through its own ResourceClaim (no GPU resource in its containers),
    allocated and reserved for it as kube-scheduler writes a claim's status."""
    plane.node("dra-used", {"cpu": "64", "memory": "512Gi"})
    plane.apply([gpu_slice("dra-used", "H100-80GB", 2)])
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "serve-dra-gpu", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    plane.request("POST", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims", claim)
    body = pod("serve-dra-0", "dra-used", resourceClaims=[{"name": "gpu", "resourceClaimName": "serve-dra-gpu"}])
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    running(plane, "ml", body)
    uid = (plane.pod("ml", "serve-dra-0") or {})["metadata"]["uid"]
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "dra-used", "device": "gpu-0"}
    status = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "serve-dra-0", "uid": uid}],
    }
    path = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/serve-dra-gpu/status"
    plane.request("PATCH", path, {"status": status}, MERGE)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three A100 nodes (idle, underused, hot by their nvidia-smi logs) and what keeps the autoscaler from them: a
    pod nothing recreates, a Deployment's pod whose PodDisruptionBudget allows no disruption, a DaemonSet's pod."""
    work = tmp_path_factory.mktemp("report-real")
    plane = audited_plane(work).start()
    try:
        for namespace in (NAMESPACE, "ml", "gpu-operator"):
            plane.namespace(namespace)
        since = round(time.time() / 60) * 60 - 86400.0  # two days of logs around now: the Event falls in the window
        utilization = (("idle", 4), ("under", 20), ("hot", 95), ("dra-idle", 3), ("dra-used", 5))
        logs = [str(write_log(work / f"{n}.csv", u, start=since)) for n, u in utilization]
        for name in ("idle", "under", "hot"):
            plane.node(name, {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "2"}, A100)
        # a node whose two GPUs NVIDIA's DRA driver publishes: nothing of them in its allocatable or labels
        plane.node("dra-idle", {"cpu": "64", "memory": "512Gi"})
        plane.apply([gpu_slice("dra-idle", "H100-80GB", 2)])
        claimed(plane)
        running(plane, "ml", pod("keep-x", "idle"))
        web = {"app": "web", "pod-template-hash": "7d9f8c"}
        running(plane, "ml", pod("web-7d9f8c-abcde", "under", owned("ReplicaSet", "web-7d9f8c"), web, gpus=1))
        running(plane, "ml", pod("train-0", "hot", {**owned("Job", "train"), "apiVersion": "batch/v1"}, gpus=2))
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
        plane.request("POST", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets", budget)
        status = {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        path = "/apis/policy/v1/namespaces/ml/poddisruptionbudgets/web/status"
        plane.request("PATCH", path, {"status": status}, MERGE)  # the disruption controller's count
        labels = {"app": "dcgm-exporter"}
        exporter = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "dcgm-exporter", "namespace": "gpu-operator"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4"}]},
                },
            },
        }
        plane.request("POST", "/apis/apps/v1/namespaces/gpu-operator/daemonsets", exporter)
        for node in ("idle", "under", "hot"):
            daemon = pod(f"dcgm-exporter-{node}", node, owned("DaemonSet", "dcgm-exporter"), labels)
            running(plane, "gpu-operator", daemon)
        metrics = preempt(plane, work)
        plane.apply(cluster_role(READER))
        kubeconfig = plane.service_account_kubeconfig(NAMESPACE, READER)
        yield Cluster(plane, AuditLog(work / "audit.log"), kubeconfig, logs, work, metrics)
    finally:
        plane.stop()


def report(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpupack", "report", "--nvidia-smi", *cluster.logs, "--json", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env_without_proxy())


def judged(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The report's document without the line naming where the cluster came from."""
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return {k: v for k, v in document.items() if k != "source"}


def test_the_report_sees_what_the_api_holds_as_kubectl_get_shows_it(cluster: Cluster) -> None:
    since = cluster.audit.mark()
    live = report(cluster, "--kubeconfig", str(cluster.kubeconfig))
    user = service_account_user(NAMESPACE, READER)
    made = cluster.audit.requests(since, user)
    assert refusals(made) == []
    assert verbs(made) == {("list", group, resource) for _, group, resource in CLUSTER_LISTS + DRA_CLUSTER_LISTS}
    assert all(r.namespace is None for r in made)  # all namespaces
    events = [r.uri for r in made if r.resource == "events"]
    # the API server sends only kube-scheduler's preemptions and Karpenter's blocked disruptions, a list each
    for reason in ("Preempted", "DisruptionBlocked", "Unconsolidatable"):
        assert sum(f"fieldSelector=reason%3D{reason}" in uri for uri in events) == 1, events
    assert len(events) == 3
    listed = cluster.plane.kubectl(
        "get",
        "nodes,pods,pdb,daemonsets,events,resourceslices,resourceclaims",
        "-A",
        "-o",
        "json",
        kubeconfig=cluster.kubeconfig,
    )
    file = cluster.work / "cluster.json"
    file.write_text(listed.stdout)
    offline = report(cluster, "--cluster", str(file))
    assert json.loads(live.stdout)["source"].endswith("cluster: the API")
    assert judged(live) == judged(offline)
    found = {(f["kind"], f["node"], f["pod"], f["evidence"].get("reason")) for f in judged(live)["findings"]}
    assert ("idle-node", "idle", None, None) in found
    assert ("idle-node", "dra-idle", None, None) in found  # its GPUs come from ResourceSlices
    # the whole GPU a pod holds through its ResourceClaim is that pod's: under 10 % it is oversized
    (oversized,) = [f for f in judged(live)["findings"] if f["workload"] == "Pod ml/serve-dra-0"]
    assert (oversized["kind"], oversized["node"], oversized["evidence"]["util_mean"]) == (
        "oversized-workload",
        "dra-used",
        5,
    )
    assert "drop the ResourceClaim that gives it the whole GPU" in oversized["action"]
    assert ("scale-down-blocker", "idle", "ml/keep-x", "NotReplicated") in found  # a pod
    assert ("scale-down-blocker", "under", "ml/web-7d9f8c-abcde", "NotEnoughPdb") in found  # its PDB's status
    assert ("scale-down-blocker", "idle", None, "DaemonSetUtilization") in found  # the DaemonSet's pod
    # the DaemonSet's pods never block, the Job's does not either (something recreates it)
    assert not {f for f in found if f[2] and f[2].startswith(("gpu-operator/", "ml/train"))}
    # the victim is gone: its Job is found by the replacement the Job made (`generateName` etl-)
    (churn,) = [f for f in judged(live)["findings"] if f["kind"] == "preemption-churn"]
    assert churn["workload"] == "Job ml/etl"
    evidence = churn["evidence"]
    assert (evidence["victims"], evidence["event_victims"], evidence["event_gpu_victims"]) == (None, 1, 1)
    assert (evidence["top_workloads"], evidence["preemptors"]) == ("Job ml/etl: 1 pod (1 on GPUs)", "pod ml/serve-0: 1")


def test_kube_scheduler_exposes_the_families_the_report_asks_prometheus_for(cluster: Cluster) -> None:
    """The names, types and buckets `gpupack.report.promql` and `gpupack.testing.scheduler` assume, from the real
    binary after one preemption of one victim."""
    lines = cluster.scheduler_metrics.splitlines()
    assert f"# TYPE {PREEMPTION_ATTEMPTS} counter" in lines
    assert f"# TYPE {PREEMPTION_VICTIMS} histogram" in lines
    family = [line for line in lines if line.startswith(f"{PREEMPTION_VICTIMS}_")]
    bounds = [line.split('le="', 1)[1].split('"', 1)[0] for line in family if "_bucket{" in line]
    assert bounds == [str(b) for b in VICTIM_BUCKETS] + ["+Inf"]  # and no other label: it names no pod
    assert all(line.startswith(f'{PREEMPTION_VICTIMS}_bucket{{le="') for line in family if "_bucket" in line)
    assert f"{PREEMPTION_VICTIMS}_count 1" in lines and f"{PREEMPTION_VICTIMS}_sum 1" in lines
    (attempts,) = [line for line in lines if line.startswith(f"{PREEMPTION_ATTEMPTS} ")]
    assert float(attempts.split()[1]) >= 1  # the preemptor's, and the replacement's that found no victim


@pytest.mark.parametrize("missing", CLUSTER_LISTS, ids=[kind for kind, _, _ in CLUSTER_LISTS])
def test_without_one_list_permission_the_report_refuses_in_one_line_naming_the_resource(
    cluster: Cluster, missing: tuple[str, str, str]
) -> None:
    name = f"report-without-{missing[2]}"
    cluster.plane.apply(cluster_role(name, tuple(rule for rule in CLUSTER_LISTS if rule != missing)))
    kubeconfig = cluster.plane.service_account_kubeconfig(NAMESPACE, name)
    done = report(cluster, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    resource = resource_name(missing[1], missing[2])
    assert line.startswith(f"gpupack report: LIST {resource}: HTTP 403: ")
    assert f'cannot list resource "{missing[2]}" in API group "{missing[1]}" at the cluster scope' in line
    *first, last = [resource_name(group, resource) for _, group, resource in CLUSTER_LISTS]
    assert f"the report needs list on {', '.join(first)} and {last}" in line


def test_without_the_dra_lists_the_report_counts_device_plugin_gpus_and_says_so(cluster: Cluster) -> None:
    cluster.plane.apply(cluster_role("report-without-dra", CLUSTER_LISTS))
    kubeconfig = cluster.plane.service_account_kubeconfig(NAMESPACE, "report-without-dra")
    done = report(cluster, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert "cannot list resourceslices.resource.k8s.io (403): the report counts device-plugin GPUs only" in done.stderr
    assert "cannot list resourceclaims.resource.k8s.io (403): pods holding a DRA device through" in done.stderr
    without, full = judged(done)["savings"], judged(report(cluster, "--kubeconfig", str(cluster.kubeconfig)))["savings"]
    # the DRA nodes' GPUs are missing from the count without them, and there with them
    assert (without["gpu_nodes_now"], full["gpu_nodes_now"]) == (4, 6)
    assert "dra-idle" not in without["removable"] and "dra-idle" in full["removable"]


def test_the_report_page_names_the_permissions_the_report_reads_with() -> None:
    text = " ".join((ROOT / "docs" / "admins" / "report.md").read_text().split())
    wanted = ", ".join(f"`{resource_name(group, resource)}`" for _, group, resource in CLUSTER_LISTS[:-1])
    last = resource_name(*CLUSTER_LISTS[-1][1:])
    assert f"needs `list` on {wanted} and `{last}`" in text
    dra = " and ".join(f"`{resource_name(group, resource)}`" for _, group, resource in DRA_CLUSTER_LISTS)
    assert f"also needs `list` on {dra}" in text
