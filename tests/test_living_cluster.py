"""The living cluster's own smoke tests (`gpupack.testing.living_cluster`): Karpenter buys a node of the right GPU
model for pending pods, the default kube-scheduler binds them, kwok runs and ends them, kube-controller-manager's
controllers keep the workloads alive, and Karpenter removes the node a finished Job emptied.

One cluster for the module; each test has its namespace and its NodePool's nodes (A100, H100, T4), so none waits
for another's. The first tests need no cluster: the fixture files agree with gpupack's GPU catalog.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupack.core.gpus.catalog import MODELS
from gpupack.core.objects import GFD_COUNT, GFD_MEMORY, GFD_PRODUCT, GFD_REPLICAS, GFD_SHARING_STRATEGY
from gpupack.testing.control_plane import ControlPlane, forbidden_lines, iter_documents, wait_until
from gpupack.testing.living_cluster import (
    FIXTURES,
    GPU_TAINT,
    NODEPOOL,
    PLANE_ARGS,
    RUN_FOR,
    LivingCluster,
    metric_samples,
    missing_tools,
    run_for_seconds,
)

pytestmark = pytest.mark.timeout(300)
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
CAPACITY_TYPE = "karpenter.sh/capacity-type"


def instance_types() -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in json.loads((FIXTURES / "instance-types.json").read_text())}


def node_pools() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in iter_documents((FIXTURES / "nodepools.yaml").read_text())}


# the fixture files, without a cluster -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "model", "instance", "gpu_resources"),
    [
        ("a100", "A100-40GB", "p4d.24xlarge", {"nvidia.com/mig-1g.5gb": 16, "nvidia.com/mig-2g.10gb": 8,
                                                "nvidia.com/mig-3g.20gb": 8}),
        ("h100", "H100-80GB", "p5.48xlarge", {"nvidia.com/gpu": 8}),
        ("t4", "T4-16GB", "g4dn.12xlarge", {"nvidia.com/gpu.shared": 16}),
    ],
)  # fmt: skip
def test_each_node_pool_labels_its_nodes_as_gpu_feature_discovery_would_and_picks_its_instance_type(
    pool: str, model: str, instance: str, gpu_resources: dict[str, int]
) -> None:
    # The product and memory are the catalog's, so the extender reads the model these nodes have; the instance
    # type's GPU resources are what the device plugin would show for that many GPUs in that layout.
    found = node_pools()[pool]
    labels = found["spec"]["template"]["metadata"]["labels"]
    catalog = MODELS[model]
    assert labels[GFD_PRODUCT] == catalog.product and labels[GFD_MEMORY] == str(catalog.memory_mib)
    requirements = {r["key"]: r["values"] for r in found["spec"]["template"]["spec"]["requirements"]}
    assert requirements == {INSTANCE_TYPE: [instance], CAPACITY_TYPE: ["spot", "on-demand"]}
    assert found["spec"]["template"]["spec"]["taints"] == [GPU_TAINT]
    resources = instance_types()[instance]["resources"]
    assert {k: int(v) for k, v in resources.items() if k.startswith("nvidia.com/")} == gpu_resources
    gpus = int(labels[GFD_COUNT])
    replicas = int(labels.get(GFD_REPLICAS, "1"))
    if pool == "a100":  # all-balanced: per GPU two 1g.5gb, one 2g.10gb, one 3g.20gb
        assert labels["nvidia.com/mig.config"] == "all-balanced" and labels["nvidia.com/mig.strategy"] == "mixed"
        assert gpu_resources == {"nvidia.com/mig-1g.5gb": 2 * gpus, "nvidia.com/mig-2g.10gb": gpus,
                                 "nvidia.com/mig-3g.20gb": gpus}  # fmt: skip
    elif pool == "t4":
        assert labels[GFD_SHARING_STRATEGY] == "time-slicing" and sum(gpu_resources.values()) == gpus * replicas
    else:
        assert sum(gpu_resources.values()) == gpus


def test_every_instance_type_has_spot_and_on_demand_in_each_zone_with_spot_cheaper() -> None:
    for name, found in instance_types().items():
        prices: dict[tuple[str, str], float] = {}
        for offering in found["offerings"]:
            requirement = {r["key"]: r["values"] for r in offering["Requirements"]}
            prices[requirement[CAPACITY_TYPE][0], requirement["topology.kubernetes.io/zone"][0]] = offering["Price"]
        zones = {zone for _, zone in prices}
        assert 1 <= len(zones) <= 2 and set(prices) == {(c, z) for c in ("spot", "on-demand") for z in zones}, name
        for zone in zones:
            assert 0.3 <= prices["spot", zone] / prices["on-demand", zone] <= 0.4, name


def test_run_for_reads_go_durations_and_refuses_what_the_stage_would_take_for_no_delay() -> None:
    assert run_for_seconds("90s") == 90 and run_for_seconds("1m30s") == 90 and run_for_seconds("1h") == 3600
    for bad in ("90", "1.5", "soon", "", "-5s"):
        with pytest.raises(ValueError):
            run_for_seconds(bad)


def test_metric_samples_reads_prometheus_text() -> None:
    text = (
        "# TYPE karpenter_nodeclaims_disrupted_total counter\n"
        'karpenter_nodeclaims_disrupted_total{nodepool="h100",reason="empty"} 2\n'
        'karpenter_nodeclaims_disrupted_total{nodepool="a100",reason="underutilized"} 1\n'
        "karpenter_nodeclaims_created_total 3\n"
    )
    assert metric_samples(text, "karpenter_nodeclaims_disrupted_total") == [
        ({"nodepool": "h100", "reason": "empty"}, 2.0),
        ({"nodepool": "a100", "reason": "underutilized"}, 1.0),
    ]
    assert metric_samples(text, "karpenter_nodeclaims_created_total") == [({}, 3.0)]


# the cluster ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivingCluster]:
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    plane = ControlPlane(tmp_path_factory.mktemp("living") / "plane", extra_args=PLANE_ARGS)
    try:
        plane.start()
        living = LivingCluster(plane, consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after="10s")
        living.start()
        yield living
        refused = {n: forbidden_lines(t) for n, t in plane.logs().items() if n != "kube-apiserver"}
        assert all(not lines for lines in refused.values()), refused
    finally:
        plane.stop()


def namespace(cluster: LivingCluster, name: str) -> str:
    """A namespace as a user makes one: kube-controller-manager gives it its `default` ServiceAccount and its
    `kube-root-ca.crt`."""
    plane = cluster.plane
    plane.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(
        lambda: (
            plane.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            and plane.get(f"/api/v1/namespaces/{name}/configmaps/kube-root-ca.crt")
        ),
        30,
        f"{name}'s default ServiceAccount and kube-root-ca.crt",
    )
    return name


def stamp(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_job_gets_an_h100_node_runs_its_time_succeeds_and_karpenter_removes_the_emptied_node(
    cluster: LivingCluster,
) -> None:
    ns = namespace(cluster, "train")
    created_before = cluster.metric("karpenter_nodeclaims_created_total", nodepool="h100")
    cluster.job("train", ns, {"nvidia.com/gpu": "1"}, run_for="20s")
    # Karpenter buys one H100 node (the cheapest offering: spot), labelled by its NodePool.
    claims = cluster.wait_node_claims(lambda c: c, 60, "an h100 NodeClaim", pool="h100")
    assert len(claims) == 1, claims
    node = cluster.wait_nodes(lambda n: n and n[0], 60, "the h100 node", pool="h100")
    labels = node["metadata"]["labels"]
    assert labels[INSTANCE_TYPE] == "p5.48xlarge" and labels[CAPACITY_TYPE] == "spot"
    assert labels[GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3" and labels[GFD_COUNT] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    name = node["metadata"]["name"]
    # The default scheduler binds the Job's pod there; kwok makes the node Ready (and kube-controller-manager
    # lifts the not-ready taint), then runs the pod.
    pod = wait_until(lambda: (p := cluster.pods(ns, "job-name=train")) and p[0]["spec"].get("nodeName") and p[0],
                     60, "the Job's pod bound")  # fmt: skip
    pod_name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == name and pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["metadata"]["annotations"][RUN_FOR] == "20s"
    cluster.wait_nodes(lambda n: n and cluster.ready(n[0]), 60, "the h100 node Ready", pool="h100")
    running = cluster.wait_phase(ns, pod_name, "Running", 60)
    # It runs its 20 s from its start, then succeeds as a kubelet reports a container that exited 0.
    done = cluster.wait_phase(ns, pod_name, "Succeeded", 60)
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    ran = stamp(terminated["finishedAt"]) - stamp(running["status"]["startTime"])
    assert 20 <= ran.total_seconds() <= 40, ran  # its time, and not much more on a busy machine
    job = wait_until(
        lambda: (
            (j := cluster.get(f"/apis/batch/v1/namespaces/{ns}/jobs/train"))
            and any(c["type"] == "Complete" and c["status"] == "True" for c in j["status"].get("conditions", []))
            and j
        ),
        30,
        "the Job Complete",
    )
    assert job["status"]["succeeded"] == 1
    # The node is empty: Karpenter removes it (consolidateAfter 10 s, then its 15 s validation).
    cluster.wait_node_gone(name, 120)
    assert cluster.nodes("h100") == [] and cluster.node_claims("h100") == []
    assert cluster.metric("karpenter_nodeclaims_created_total", nodepool="h100") == created_before + 1
    assert cluster.metric("karpenter_nodeclaims_disrupted_total", nodepool="h100", reason="empty") >= 1
    assert any(name in e.get("command", "") for e in cluster.karpenter_events("disrupting node(s)"))


def test_a_mig_deployment_lands_on_an_a100_node_a_deleted_pod_is_replaced_and_its_budget_is_computed(
    cluster: LivingCluster,
) -> None:
    ns = namespace(cluster, "infer")
    cluster.deployment("infer", ns, {"nvidia.com/mig-1g.5gb": "1"}, replicas=2)
    cluster.pod_disruption_budget("infer", ns, {"app": "infer"}, min_available=1)

    def running() -> list[dict[str, Any]]:
        pods = [p for p in cluster.pods(ns, "app=infer") if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else []

    pods = wait_until(running, 90, "two infer pods Running")
    nodes = cluster.nodes("a100")
    assert len(nodes) == 1, [n["metadata"]["name"] for n in nodes]  # one batch, one node: 16 slices for 2 pods
    assert {p["spec"]["nodeName"] for p in pods} == {nodes[0]["metadata"]["name"]}
    labels = nodes[0]["metadata"]["labels"]
    assert labels[INSTANCE_TYPE] == "p4d.24xlarge" and labels[NODEPOOL] == "a100"
    assert labels["nvidia.com/mig.config"] == "all-balanced" and labels[GFD_PRODUCT] == "NVIDIA-A100-SXM4-40GB"
    assert nodes[0]["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] == "16"
    # The disruption controller computes the budget: 2 healthy, 1 must stay.
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/infer"
    budget = wait_until(
        lambda: (b := cluster.get(path)).get("status", {}).get("currentHealthy") == 2 and b, 30, "the PDB's status"
    )
    assert budget["status"]["disruptionsAllowed"] == 1 and budget["status"]["expectedPods"] == 2
    # A deleted pod (kwok removes it) is replaced by the ReplicaSet, on the node already there.
    gone = pods[0]["metadata"]["name"]
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{gone}")
    wait_until(lambda: cluster.plane.pod(ns, gone) is None, 30, f"{gone} removed")
    replaced = wait_until(lambda: (p := running()) and gone not in {q["metadata"]["name"] for q in p} and p,
                          60, "a replacement Running")  # fmt: skip
    assert {p["spec"]["nodeName"] for p in replaced} == {nodes[0]["metadata"]["name"]}
    assert len(cluster.nodes("a100")) == 1
    owners = {o["kind"] for p in replaced for o in p["metadata"]["ownerReferences"]}
    assert owners == {"ReplicaSet"}
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{ns}")  # its node goes (the namespace controller's work)


def test_a_time_sliced_pod_gets_a_t4_node(cluster: LivingCluster) -> None:
    ns = namespace(cluster, "batch")
    cluster.pod("embed", ns, {"nvidia.com/gpu.shared": "1"})
    pod = cluster.wait_phase(ns, "embed", "Running", 90)
    node = cluster.node(pod["spec"]["nodeName"])
    assert node is not None
    labels = node["metadata"]["labels"]
    assert labels[NODEPOOL] == "t4" and labels[INSTANCE_TYPE] == "g4dn.12xlarge" and labels[CAPACITY_TYPE] == "spot"
    assert labels[GFD_PRODUCT] == "Tesla-T4" and labels[GFD_REPLICAS] == "4"
    assert labels[GFD_SHARING_STRATEGY] == "time-slicing"
    assert node["status"]["allocatable"]["nvidia.com/gpu.shared"] == "16"
    assert {t["key"] for t in node["spec"].get("taints", [])} == {GPU_TAINT["key"]}
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_a_pod_without_a_gpu_makes_karpenter_buy_nothing(cluster: LivingCluster) -> None:
    # Every NodePool taints its nodes for GPUs: a pod that tolerates no such taint makes Karpenter buy nothing
    # (a CPU pod would otherwise get the cheapest GPU node) and stays pending.
    ns = namespace(cluster, "cpu")
    before = len(cluster.node_claims())
    cluster.pod("sidecar", ns, {"cpu": "1"}, tolerations=())
    wait_until(
        lambda: any("did not tolerate" in json.dumps(e) and "sidecar" in json.dumps(e)
                    for e in cluster.karpenter_events("could not schedule pod")),
        30,
        "Karpenter saying no NodePool takes the pod",
    )  # fmt: skip
    assert len(cluster.node_claims()) == before
    pod = cluster.plane.pod(ns, "sidecar")
    assert pod is not None and not pod["spec"].get("nodeName")
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_the_fixture_refuses_a_plane_without_its_api_server_arguments(tmp_path: Path) -> None:
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    with pytest.raises(ValueError, match="WatchList"):
        LivingCluster(ControlPlane(tmp_path / "plane")).start()  # refused before anything starts


def test_karpenter_serves_its_metrics(cluster: LivingCluster) -> None:
    # Counters such as karpenter_nodeclaims_created_total appear with their first sample; these from the start.
    assert cluster.metric("karpenter_cluster_state_synced") == 1
    pools = {labels.get("nodepool") for labels, _ in metric_samples(cluster.metrics(), "karpenter_nodepools_usage")}
    assert pools >= {"a100", "h100", "t4"}, pools
