"""GPUs from ResourceSlices and ResourceClaims (gpupack.core.dra), and the extender's state merging them into its
node records: a DRA node counts for placement as the device-plugin node with the same GPUs would."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from gpupack.core.claim_templates import alternatives
from gpupack.core.dra import claim_from_json, gpus_by_node, node_gpus, nodes_by_uuid, slice_from_json
from gpupack.core.kube import offered_by_device_classes
from gpupack.core.policy import MetricsPolicy, Policy, parse_policy
from gpupack.extender.changes import apply_events
from gpupack.extender.demand import DemandError, demand_of
from gpupack.extender.inventory import node_from_json
from gpupack.extender.live import EMPTY
from gpupack.extender.sources import LiveMetricsCache, StaticSource
from gpupack.extender.state import CLAIM_KEY, ClusterState
from gpupack.extender.verbs import View, filter_nodes, preempt_nodes, prioritize_nodes
from gpupack.extender.wire import ExtenderArgs, PreemptionArgs
from gpupack.migplan.demand import mig_nodes
from gpupack.report.cluster import from_objects, gpu_nodes_of, gpu_resources
from gpupack.testing.dcgm import Gpu, Node, exposition
from gpupack.testing.dra import (
    allocated_claim,
    device_class,
    driver_classes,
    gpu_slice,
    mig_device,
    mig_slice,
    partitionable_slices,
    resource_slice,
    uuid,
    whole_gpu,
)
from tests.extender_kit import extender_for, gpu_pod

POLICY = Policy()
GPU = "nvidia.com/gpu"


def node(name: str, allocatable: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": "96", "memory": "1000Gi", **(allocatable or {})}},
    }


def used(state: ClusterState, name: str = "dra") -> dict[str, int]:
    """What is in use on the node (the running sums keep zeros)."""
    return {r: n for r, n in state.used(name).items() if n}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


# reading slices and claims -------------------------------------------------------------------------------------


def test_a_gpu_slice_reads_as_whole_gpus_of_its_node() -> None:
    published = slice_from_json(gpu_slice("h100-1", "H100-80GB", 8))
    assert published is not None
    assert (published.node, published.pool, len(published.devices)) == ("h100-1", "h100-1", 8)
    first = published.devices[0]
    assert (first.name, first.kind, first.resource) == ("gpu-0", "gpu", GPU)
    assert first.product == "NVIDIA H100 80GB HBM3"
    assert first.memory == 81559 * 2**20
    assert first.physical == uuid("h100-1", 0)


def test_mig_devices_read_as_their_profiles_resources_on_their_parent_gpus() -> None:
    layouts = [{"1g.5gb": 7}, {"3g.20gb": 2}]
    gpus = node_gpus("a100-1", [slice_from_json(mig_slice("a100-1", "A100-40GB", layouts))])  # type: ignore[list-item]
    assert gpus.offered() == {"nvidia.com/mig-1g.5gb": 7, "nvidia.com/mig-3g.20gb": 2}
    assert gpus.physical_gpus == 2
    assert gpus.product == "NVIDIA A100-SXM4-40GB"
    assert not gpus.partitionable


def test_another_drivers_slice_and_a_slice_without_a_node_are_not_gpus() -> None:
    other = gpu_slice("n", "H100-80GB", 1)
    other["spec"]["driver"] = "dra.example.com"
    assert slice_from_json(other) is None
    network = gpu_slice("n", "H100-80GB", 1)
    del network["spec"]["nodeName"]
    network["spec"]["allNodes"] = True
    assert slice_from_json(network) is None


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = slice_from_json(gpu_slice("n", "H100-80GB", 8))
    new = resource_slice("n", [whole_gpu("n", "H100-80GB", i) for i in range(4)], generation=2)
    new["metadata"]["name"] = "n-new"
    gpus = node_gpus("n", [old, slice_from_json(new)])  # type: ignore[list-item]
    assert gpus.offered() == {GPU: 4}


def test_partitionable_devices_offer_each_profile_as_often_as_the_counters_allow_at_once() -> None:
    """Dynamic MIG: the whole GPU and every placement consume the GPU's memory slices; the node offers seven
    1g.5gb or one whole GPU, not both, and its capacity is one GPU."""
    counters = {f"memory-slice-{i}": {"value": "1"} for i in range(8)}
    devices = [
        {
            **whole_gpu("n", "A100-40GB", 0),
            "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": counters}],
        }
    ]
    for start in range(7):
        device = mig_device("n", "A100-40GB", 0, "1g.5gb", start)
        device["consumesCounters"] = [
            {"counterSet": "gpu-0-counter-set", "counters": {f"memory-slice-{start}": {"value": "1"}}}
        ]
        devices.append(device)
    with_devices = resource_slice("n", devices)
    with_devices["spec"]["pool"]["resourceSliceCount"] = 2
    shared = resource_slice("n", [])
    shared["metadata"]["name"] = "n-counters"
    del shared["spec"]["devices"]
    shared["spec"]["pool"]["resourceSliceCount"] = 2
    shared["spec"]["sharedCounters"] = [{"name": "gpu-0-counter-set", "counters": counters}]
    gpus = node_gpus("n", [slice_from_json(with_devices), slice_from_json(shared)])  # type: ignore[list-item]
    assert gpus.partitionable
    assert gpus.offered() == {GPU: 1, "nvidia.com/mig-1g.5gb": 7}
    assert gpus.physical_gpus == 1
    state = ClusterState()
    state.upsert_node(node_from_json(node("n"), POLICY))
    apply_events(state, "resourceslices", [event("ADDED", with_devices), event("ADDED", shared)], POLICY)
    assert state.nodes["n"].gpu_capacity == 1.0
    assert state.nodes["n"].gpu_model == "A100-40GB"
    # a claim holds one 1g.5gb placement (kube-scheduler's, for a pod's extended-resource request): six more fit,
    # the whole GPU no longer does
    carved = allocated_claim("carved", [("n", "gpu-0-mig-1g5gb-19-3")], extended=True)
    apply_events(state, "resourceclaims", [event("ADDED", carved)], POLICY)
    assert gpus.offered(["gpu-0-mig-1g5gb-19-3"]) == {GPU: 0, "nvidia.com/mig-1g.5gb": 7}
    assert state.nodes["n"].allocatable[GPU] == 0
    assert state.nodes["n"].allocatable["nvidia.com/mig-1g.5gb"] == 7
    apply_events(state, "resourceclaims", [event("DELETED", carved)], POLICY)
    assert state.nodes["n"].allocatable[GPU] == 1


def test_a_claim_reads_its_drivers_devices_and_whether_the_scheduler_made_it() -> None:
    held = claim_from_json(allocated_claim("c", [("h100-1", "gpu-3")]))
    assert (held.key, held.devices, held.extended, held.pods) == ("ml/c", (("h100-1", "gpu-3"),), False, ("uid-c",))
    assert claim_from_json(allocated_claim("e", [("h100-1", "gpu-3")], extended=True)).extended
    assert claim_from_json(allocated_claim("o", [("x", "y")], driver="dra.example.com")).devices == ()
    pending = allocated_claim("p", [])
    del pending["status"]
    assert claim_from_json(pending).devices == ()


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda s: s["spec"].update(devices={"gpu-0": {}}), "spec.devices must be a list"),
        (lambda s: s["spec"]["devices"][0].pop("name"), "spec.devices[0].name is missing"),
        (lambda s: s["spec"]["devices"][0]["capacity"]["memory"].update(value="lots"), "capacity.memory.value"),
        (lambda s: s["spec"]["pool"].update(generation="1"), "spec.pool.generation must be an integer"),
        (lambda s: s["spec"].update(devices=[whole_gpu("n", "H100-80GB", 0)] * 2000), "more than any slice holds"),
        (lambda s: s["spec"]["devices"][0]["attributes"].update(type={"string": "mig"}), "without the profile"),
        (lambda s: s.update(metadata={}), "ResourceSlice without metadata.name"),
    ],
)
def test_a_malformed_slice_is_refused_naming_the_slice_and_field(break_it: Any, message: str) -> None:
    broken = gpu_slice("n", "H100-80GB", 2)
    break_it(broken)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        slice_from_json(broken)


# the extender's state --------------------------------------------------------------------------------------------


def dra_state() -> ClusterState:
    """A device-plugin H100 node and a DRA one with the same GPUs."""
    state = ClusterState()
    state.upsert_node(
        node_from_json(node("plugin", {GPU: "8"}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), POLICY)
    )
    state.upsert_node(node_from_json(node("dra"), POLICY))
    apply_events(state, "resourceslices", [event("ADDED", gpu_slice("dra", "H100-80GB", 8))], POLICY)
    return state


def test_a_dra_node_offers_its_devices_as_the_device_plugin_node_with_the_same_gpus() -> None:
    state = dra_state()
    plugin, dra = state.nodes["plugin"], state.nodes["dra"]
    assert dra.allocatable[GPU] == plugin.allocatable[GPU] == 8
    assert (dra.gpu_count, dra.gpu_capacity, dra.shares) == (plugin.gpu_count, plugin.gpu_capacity, plugin.shares)
    assert dra.product == "NVIDIA H100 80GB HBM3"


def test_slices_before_their_node_and_a_deleted_slice_are_applied() -> None:
    state = ClusterState()
    apply_events(state, "resourceslices", [event("ADDED", gpu_slice("late", "H100-80GB", 4))], POLICY)
    assert "late" not in state.nodes
    state.upsert_node(node_from_json(node("late"), POLICY))
    assert state.nodes["late"].allocatable[GPU] == 4
    apply_events(state, "resourceslices", [event("DELETED", gpu_slice("late", "H100-80GB", 4))], POLICY)
    assert GPU not in state.nodes["late"].allocatable
    state.upsert_node(node_from_json(node("late"), POLICY))  # a Node update keeps the (now no) devices
    assert state.nodes["late"].gpu_count == 0


def test_a_claim_counts_its_devices_on_their_node_once_and_the_scheduler_made_ones_not_at_all() -> None:
    state = dra_state()
    apply_events(
        state, "resourceclaims", [event("ADDED", allocated_claim("mine", [("dra", "gpu-0"), ("dra", "gpu-1")]))], POLICY
    )
    assert used(state) == {GPU: 2}
    # kube-scheduler's claim for a pod's `nvidia.com/gpu` request: the pod's request counts it already
    apply_events(
        state, "resourceclaims", [event("ADDED", allocated_claim("ext", [("dra", "gpu-2")], extended=True))], POLICY
    )
    assert used(state) == {GPU: 2}
    apply_events(state, "resourceclaims", [event("MODIFIED", allocated_claim("mine", [("dra", "gpu-0")]))], POLICY)
    assert used(state) == {GPU: 1}
    apply_events(state, "resourceclaims", [event("DELETED", allocated_claim("mine", []))], POLICY)
    assert used(state) == {}
    assert not [k for k in state.pods if k.startswith(CLAIM_KEY)]


def test_dcgm_series_of_a_dra_gpu_are_its_nodes_by_uuid_whatever_the_host_label(tmp_path: Path) -> None:
    """The exporter's host label holds its own pod's name where NODE_NAME is unset; the GPU's UUID, which the
    driver publishes too, still names the node, so the hot filter sees the DRA node's GPUs."""
    state = dra_state()
    assert len(state.gpu_nodes) == 8 and set(state.gpu_nodes.values()) == {"dra"}
    text = exposition([Node("dra", [Gpu(95.0)] * 8)]).replace('hostname="dra"', 'hostname="dcgm-exporter-x7k2p"')
    path = tmp_path / "metrics.txt"
    path.write_text(text)
    reads: list[bool] = []
    cache = LiveMetricsCache(StaticSource(path), MetricsPolicy, reads.append, lambda: state.gpu_nodes)
    asyncio.run(cache.refresh())
    assert reads == [True] and "dcgm-exporter-x7k2p" not in cache.snapshot.nodes
    assert cache.snapshot.fresh_utils("dra", time.time(), 60) == (0.95,) * 8
    pod = {
        "metadata": {"name": "serve", "namespace": "ml", "labels": {"gpupack.io/workload": "inference"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {GPU: "1"}}}]},
    }
    outcome = filter_nodes(
        demand_of(pod, POLICY), ExtenderArgs(pod, ["dra"], None), View(state, cache.snapshot, POLICY)
    )
    assert outcome.unresolvable["dra"].startswith("every GPU is above the hot threshold"), outcome
    # without the map the series are the exporter pod's, and the DRA node has no measured GPU
    blind = LiveMetricsCache(StaticSource(path), MetricsPolicy, reads.append)
    asyncio.run(blind.refresh())
    assert set(blind.snapshot.nodes) == {"dcgm-exporter-x7k2p"}
    # a MIG device names its GPU by parentUUID: the same GPU, the same node
    mig = gpus_by_node([mig_slice("m", "A100-40GB", [{"1g.5gb": 7}, {"3g.20gb": 2}])])
    assert nodes_by_uuid(mig) == {uuid("m", 0): "m", uuid("m", 1): "m"}


def test_claims_stay_counted_through_a_full_list_of_pods() -> None:
    state = dra_state()
    apply_events(state, "resourceclaims", [event("ADDED", allocated_claim("mine", [("dra", "gpu-0")]))], POLICY)
    state.replace_pods([])
    assert used(state) == {GPU: 1}


def test_a_claim_on_a_device_no_slice_publishes_is_logged_and_not_counted(caplog: pytest.LogCaptureFixture) -> None:
    state = dra_state()
    with caplog.at_level(logging.WARNING):
        apply_events(
            state,
            "resourceclaims",
            [event("ADDED", allocated_claim("ghost", [("dra", "gpu-99"), ("dra", "gpu-1")]))],
            POLICY,
        )
    assert used(state) == {GPU: 1}
    assert "ResourceClaim ml/ghost holds devices no ResourceSlice publishes, not counted: dra/gpu-99" in caplog.text
    # the slice that publishes it arrives: the claim is counted whole
    bigger = copy.deepcopy(gpu_slice("dra", "H100-80GB", 8))
    bigger["spec"]["devices"].append({**whole_gpu("dra", "H100-80GB", 99), "name": "gpu-99"})
    apply_events(state, "resourceslices", [event("MODIFIED", bigger)], POLICY)
    assert used(state) == {GPU: 2}


def test_a_malformed_slice_or_claim_event_is_skipped_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    state = dra_state()
    broken = gpu_slice("dra", "H100-80GB", 8)
    broken["spec"]["devices"] = "eight"
    bad_claim = allocated_claim("bad", [("dra", "gpu-0")])
    bad_claim["status"]["allocation"]["devices"]["results"][0].pop("pool")
    with caplog.at_level(logging.WARNING):
        skipped = apply_events(state, "resourceslices", [event("MODIFIED", broken)], POLICY)
        skipped += apply_events(state, "resourceclaims", [event("ADDED", bad_claim)], POLICY)
    assert skipped == 2
    assert state.nodes["dra"].allocatable[GPU] == 8  # what was known stays
    assert used(state) == {}
    assert "spec.devices must be a list" in caplog.text
    assert "without pool or device" in caplog.text


# the extender for pods sized through a claim (policy dra.memorySizing) ----------------------------------------------

ON = parse_policy(b"dra:\n  memorySizing: true\n")
SLICE_1G = "nvidia.com/mig-1g.5gb"


def claim_pod(name: str, template: str = "gpupack-gpu-5gi") -> dict[str, Any]:
    """A pod as the webhook leaves it with DRA sizing: a claim from one of gpupack's templates, no GPU resource."""
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"gpupack.io/workload": "inference"},
        },
        "spec": {
            "resourceClaims": [{"name": "gpupack-gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "claims": [{"name": "gpupack-gpu"}]},
                }
            ],
        },
    }


def claim_view() -> View:
    """Two A100-40GB nodes of seven fixed 1g.5gb devices (one 1g.5gb held on `a100-b`) and an H100 of seven
    1g.10gb, all published by NVIDIA's driver."""
    state = ClusterState()
    events = []
    for name, model, profile in (("a100-a", "A100-40GB", "1g.5gb"), ("a100-b", "A100-40GB", "1g.5gb"),
                                 ("h100", "H100-80GB", "1g.10gb")):  # fmt: skip
        state.upsert_node(node_from_json(node(name), ON))
        events.append(event("ADDED", mig_slice(name, model, [{profile: 7}])))
    apply_events(state, "resourceslices", events, ON)
    held = next(d["name"] for d in mig_slice("a100-b", "A100-40GB", [{"1g.5gb": 7}])["spec"]["devices"])
    apply_events(state, "resourceclaims", [event("ADDED", allocated_claim("held", [("a100-b", held)]))], ON)
    return View(state, EMPTY, ON)


def args(pod: dict[str, Any], names: list[str]) -> ExtenderArgs:
    return ExtenderArgs(pod, names, None)


def test_a_claim_pod_asks_for_its_templates_alternatives_in_order() -> None:
    found = demand_of(claim_pod("p"), ON)
    assert found.gpu_resource is None and found.asks_gpu
    assert found.alternatives == alternatives(ON)["gpupack-gpu-5gi"]
    assert found.alternatives[:2] == (SLICE_1G, "nvidia.com/mig-1g.10gb") and found.alternatives[-1] == GPU
    # a claim from someone else's template is not gpupack's to size: the pod asks for no GPU the extender knows of
    assert not demand_of(claim_pod("q", "their-template"), ON).asks_gpu
    odd = claim_pod("s")
    odd["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = ["gpupack-gpu-5gi"]  # not a name: not ours
    assert not demand_of(odd, ON).asks_gpu
    broken = claim_pod("r")
    broken["spec"]["resourceClaims"] = ["gpupack-gpu"]
    with pytest.raises(DemandError, match=r"spec.resourceClaims\[0\] must be an object, not a string"):
        demand_of(broken, ON)


def test_a_claim_pod_is_packed_onto_the_node_whose_first_alternative_is_in_use_and_assumed_there() -> None:
    view = claim_view()
    pod = claim_pod("p")
    values = prioritize_nodes(demand_of(pod, ON), args(pod, ["a100-a", "a100-b", "h100"]), view)
    assert values[1] == max(values) and values.count(max(values)) == 1, values
    now = time.monotonic()
    assert view.state.assumed_node("uid-p") == "a100-b"
    assert view.state.used("a100-b", now).get(SLICE_1G) == 2  # the held device and this pod's
    assert not view.state.used("a100-a", now).get(SLICE_1G)


def test_a_claim_pod_takes_the_next_alternative_where_the_first_is_full() -> None:
    view = claim_view()
    for i in range(6):  # the rest of a100-b's 1g.5gb devices
        pod = claim_pod(f"fill-{i}")
        prioritize_nodes(demand_of(pod, ON), args(pod, ["a100-b"]), view)
    assert view.state.used("a100-b", time.monotonic())[SLICE_1G] == 7
    pod = claim_pod("late")
    outcome = filter_nodes(demand_of(pod, ON), args(pod, ["a100-b", "h100"]), view)
    assert outcome.passed == ["h100"]
    assert outcome.failed == {"a100-b": "0 of 7 nvidia.com/mig-1g.5gb free, pod needs 1"}  # preemption may help
    assert view.state.used("h100", time.monotonic()).get("nvidia.com/mig-1g.10gb") == 1  # assumed: the only node


def test_the_preempt_verb_keeps_the_fewest_victims_that_free_the_device_a_pod_takes_on_a_dra_node() -> None:
    """kube-scheduler v1.36 does not preempt for DRA devices (tests/test_dra_real.py shows it), so this is the verb's
    decision for when it does: on a DRA node, a victim frees what its request or its claim's device amounts to."""
    bound = [gpu_pod(SLICE_1G, 1, "batch", name=f"batch-{i}") for i in range(7)]
    bound.append(gpu_pod("cpu", 1, "batch", name="etl"))  # one CPU, no GPU
    for one in bound:
        one["spec"]["nodeName"] = "dra"
    extender = extender_for([node("dra")], bound, "dra:\n  memorySizing: true\n")
    state = extender.state
    apply_events(state, "resourceslices", [event("ADDED", mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}]))], ON)
    view = extender.view()
    assert state.used("dra")[SLICE_1G] == 7
    pod = {**claim_pod("serve"), "spec": {**claim_pod("serve")["spec"], "priorityClassName": "gpupack-inference"}}
    outcome = preempt_nodes(
        demand_of(pod, view.policy), PreemptionArgs(pod, {"dra": (("uid-batch-0", "uid-etl"), 0)}), view
    )
    # the claim pod takes a 1g.5gb there: the victim holding one is needed, the CPU-only one is given back
    assert outcome.kept["dra"].victims == ("uid-batch-0",) and outcome.trimmed == 1


def test_a_claim_pods_device_counts_once_from_its_claims_allocation_to_its_binding() -> None:
    """kube-scheduler writes the claim's allocation, then binds the pod: the claim takes over from the assumption."""
    view = claim_view()
    pod = claim_pod("p")
    prioritize_nodes(demand_of(pod, ON), args(pod, ["a100-b"]), view)
    assert view.state.used("a100-b", time.monotonic())[SLICE_1G] == 2  # the held device and the assumption
    devices = [d["name"] for d in mig_slice("a100-b", "A100-40GB", [{"1g.5gb": 7}])["spec"]["devices"]]
    apply_events(view.state, "resourceclaims", [event("ADDED", allocated_claim("p", [("a100-b", devices[1])]))], ON)
    assert view.state.used("a100-b", time.monotonic())[SLICE_1G] == 2  # the claim, not the claim and the assumption
    view.state.upsert_pod("uid-p", "a100-b", (("cpu", 1000),))  # bound: its record asks for no GPU
    assert view.state.used("a100-b", time.monotonic())[SLICE_1G] == 2


def test_a_victim_holding_its_device_through_a_claim_frees_it() -> None:
    """A claim pod's record asks for no GPU: its device counts apart (the claim). As a victim it gives it back."""
    state = ClusterState()
    state.upsert_node(node_from_json(node("a100"), ON))
    apply_events(state, "resourceslices", [event("ADDED", mig_slice("a100", "A100-40GB", [{"1g.5gb": 7}]))], ON)
    devices = [d["name"] for d in mig_slice("a100", "A100-40GB", [{"1g.5gb": 7}])["spec"]["devices"]]
    claims = [event("ADDED", allocated_claim(f"v{i}", [("a100", device)])) for i, device in enumerate(devices)]
    apply_events(state, "resourceclaims", claims, ON)
    for i in range(7):
        state.upsert_pod(f"uid-v{i}", "a100", (("cpu", 1000),), priority=-100)
    assert state.used("a100")[SLICE_1G] == 7
    held = state.holding("uid-v0")
    assert held is not None and dict(held.requests) == {"cpu": 1000, SLICE_1G: 1}
    view = View(state, EMPTY, ON)
    pod = {**claim_pod("serve"), "spec": {**claim_pod("serve")["spec"], "priority": 100000}}
    outcome = preempt_nodes(demand_of(pod, ON), PreemptionArgs(pod, {"a100": (("uid-v0",), 0)}), view)
    assert outcome.kept["a100"].victims == ("uid-v0",), outcome.dropped


# the webhook's sizing and the report -------------------------------------------------------------------------------


def test_the_webhook_is_offered_what_a_device_class_serves_from_published_devices() -> None:
    """A DeviceClass's `extendedResourceName` counts only where some device amounts to that resource; a class for
    a profile nobody publishes, or classes without the field, offer nothing."""
    slices = [gpu_slice("h", "H100-80GB", 8), mig_slice("a", "A100-40GB", [{"1g.5gb": 7}])]
    classes = [
        *driver_classes(),
        device_class("mig-1g.5gb.nvidia.com", "mig", "nvidia.com/mig-1g.5gb", "1g.5gb"),
        device_class("mig-3g.20gb.nvidia.com", "mig", "nvidia.com/mig-3g.20gb", "3g.20gb"),
    ]
    assert offered_by_device_classes(classes, slices) == {GPU, "nvidia.com/mig-1g.5gb"}
    assert offered_by_device_classes(driver_classes()[1:], slices) == frozenset()
    broken = gpu_slice("x", "H100-80GB", 1)
    broken["spec"]["devices"] = {}
    assert offered_by_device_classes(classes, [broken]) == frozenset()


def test_the_report_reads_a_dra_node_as_the_device_plugin_and_gfd_would_list_it() -> None:
    cluster = from_objects(
        [
            {"kind": "Node", **node("dra")},
            {"kind": "Node", **node("plain")},
            {"kind": "ResourceSlice", **mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}, {"3g.20gb": 2}])},
        ]
    )
    dra = cluster.node_by_name["dra"]
    assert dra["status"]["allocatable"] == {
        "cpu": "96",
        "memory": "1000Gi",
        "nvidia.com/mig-1g.5gb": "7",
        "nvidia.com/mig-3g.20gb": "2",
    }
    assert dra["metadata"]["labels"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2"}
    assert cluster.node_by_name["plain"] == {"kind": "Node", **node("plain")}
    assert [n["metadata"]["name"] for n in gpu_nodes_of(cluster, POLICY)] == ["dra"]


def test_the_report_reads_the_devices_a_pods_claims_hold_as_its_requests(caplog: pytest.LogCaptureFixture) -> None:
    """A pod sized through a claim requests no GPU resource; its claim's devices count as its requests, once: the
    claim kube-scheduler made for another pod's `nvidia.com/mig-1g.5gb` request is that pod's request already."""
    devices = [d["name"] for d in mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}])["spec"]["devices"]]
    sized = {**claim_pod("sized"), "kind": "Pod"}
    sized["spec"]["nodeName"] = "dra"
    extended = {**gpu_pod_json("ext", {"nvidia.com/mig-1g.5gb": "1"}), "kind": "Pod"}
    bad = allocated_claim("bad", [("dra", devices[3])])
    bad["status"]["reservedFor"] = "sized"
    with caplog.at_level(logging.WARNING):
        cluster = from_objects(
            [
                {"kind": "Node", **node("dra")},
                {"kind": "ResourceSlice", **mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}])},
                sized,
                extended,
                {"kind": "ResourceClaim", **allocated_claim("sized", [("dra", devices[0])])},
                {"kind": "ResourceClaim", **allocated_claim("ext", [("dra", devices[1])], extended=True)},
                {"kind": "ResourceClaim", **bad},
            ]
        )
    pods = {p["metadata"]["name"]: p for p in cluster.pods}
    assert cluster.claimed == {"uid-sized": {SLICE_1G: 1}}
    assert gpu_resources(pods["sized"], POLICY) == {SLICE_1G: 1}
    assert gpu_resources(pods["ext"], POLICY) == {SLICE_1G: 1}
    container = pods["sized"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {SLICE_1G: "1"} and container["resources"]["claims"]
    assert "ResourceClaim ml/bad: status.reservedFor must be a list" in caplog.text


def test_the_report_counts_a_shared_claim_once_and_leaves_pods_it_cannot_read_as_they_are() -> None:
    devices = [d["name"] for d in mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}])["spec"]["devices"]]
    shared = allocated_claim("shared", [("dra", devices[0])])
    shared["status"]["reservedFor"] += [{"resource": "pods", "name": "b", "uid": "uid-b"}, {"resource": "pods"}]
    odd = allocated_claim("odd", [("dra", devices[1])])  # reserved for a pod whose container cannot be read
    pods = [
        {**claim_pod("shared"), "kind": "Pod"},
        {**claim_pod("b"), "kind": "Pod"},
        {"kind": "Pod", **claim_pod("odd"), "spec": {"containers": [{"name": "main", "resources": []}]}},
        {"kind": "Pod", "metadata": ["not", "an", "object"], "spec": {}},
        {"kind": "Pod", "metadata": {"name": "no-uid"}, "spec": {"containers": [{"name": "main"}]}},
    ]
    cluster = from_objects(
        [
            {"kind": "ResourceSlice", **mig_slice("dra", "A100-40GB", [{"1g.5gb": 7}])},
            *pods,
            {"kind": "ResourceClaim", **shared},
            {"kind": "ResourceClaim", **odd},
        ]
    )
    assert cluster.claimed == {"uid-shared": {SLICE_1G: 1}, "uid-odd": {SLICE_1G: 1}}  # once, for the first pod
    found = {str(p["metadata"].get("name")) if isinstance(p["metadata"], dict) else "?": p for p in cluster.pods}
    assert gpu_resources(found["shared"], POLICY) == {SLICE_1G: 1} and not gpu_resources(found["b"], POLICY)
    assert found["odd"] == pods[2] and found["no-uid"] == pods[4] and found["?"] == pods[3]  # left as they are


def gpu_pod_json(name: str, requests: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"nodeName": "dra", "containers": [{"name": "main", "resources": {"requests": requests}}]},
    }


def test_mig_plan_leaves_dra_nodes_out_and_says_why() -> None:
    cluster = from_objects(
        [
            {"kind": "Node", **node("plugin", {"nvidia.com/mig-1g.5gb": "7"}, {"nvidia.com/gpu.count": "1"})},
            {"kind": "Node", **node("fixed")},
            {"kind": "Node", **node("dyn")},
            {"kind": "ResourceSlice", **mig_slice("fixed", "A100-40GB", [{"1g.5gb": 7}])},
            *({"kind": "ResourceSlice", **one} for one in partitionable_slices("dyn", "A100-40GB", 1)),
        ]
    )
    planned, skipped = mig_nodes(cluster, POLICY)
    assert [n.name for n in planned] == ["plugin"]
    assert skipped["dyn"].startswith("GPUs from a DRA driver with partitionable devices")
    assert skipped["fixed"].startswith("MIG devices published by a DRA driver")
