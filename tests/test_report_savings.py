"""The report's savings (report.savings): the cluster's GPU pods replayed through the webhook's plan() and the
extender's placement on its GPU nodes, on hand-made clusters whose answer is worked out by hand."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpupack.extender.inventory import node_from_json
from gpupack.report.cluster import ClusterError, gpu_nodes_of
from gpupack.report.prices import read_prices
from gpupack.report.savings import pod_work, savings, unbound
from gpupack.report.usage import GpuUsage
from tests.report_cluster_kit import A100, MIG_RESOURCES, WEEK, gpu, gpus, inputs, node, pod, usage

HOURS = WEEK.hours
WHOLE = {"nvidia.com/gpu": "1"}


def replay(objects: list[dict[str, Any]], *gpu_list: Any, **kw: Any) -> Any:
    result = savings(inputs(usage(*gpu_list), objects, **kw))
    assert result is not None
    return result


def test_whole_gpu_pods_spread_over_nodes_are_packed_and_the_rest_removable() -> None:
    # three 8-GPU nodes with one busy whole-GPU pod each (not oversized: 70 %): the extender packs the three on
    # one node, so two nodes (16 GPUs) could go
    objects = [node(n) for n in ("a", "b", "c")] + [pod(f"llm-7d9f8c-{n}", n, WHOLE) for n in ("a", "b", "c")]
    found = [gpu(n, 0, 70.0, fb_used_max=30_000.0, pods=frozenset({f"ml/llm-7d9f8c-{n}"})) for n in "abc"]
    result = replay(objects, *found)
    assert (result.gpu_nodes_now, result.gpu_nodes_needed) == (3, 1)
    assert len(result.removable) == 2 and result.unplaced == ()
    assert result.removable_gpu_hours == pytest.approx(16 * HOURS)
    assert result.removable_cost is None  # no prices: GPU-hours only
    assert result.util_after == pytest.approx(70.0) and result.overloaded == ()  # 3 GPUs in use, each 70 % busy


def test_an_oversized_workload_moves_to_mig_slices_and_frees_its_node() -> None:
    # two replicas holding whole GPUs of node g at 10 % with 5 GB: the advice (1g.10gb, 8Gi) puts both on the MIG
    # node m, which has slices free, and g is left empty
    objects = [
        node("g", 8),
        node("m", 0, **MIG_RESOURCES),
        pod("embed-7d9f8c-a", "g", WHOLE),
        pod("embed-7d9f8c-b", "g", WHOLE),
    ]
    found = [
        gpu("g", 0, 10.0, fb_used_max=5000.0, pods=frozenset({"ml/embed-7d9f8c-a"})),
        gpu("g", 1, 10.0, fb_used_max=5000.0, pods=frozenset({"ml/embed-7d9f8c-b"})),
        gpu("m", 0, 40.0),
    ]
    result = replay(objects, *found)
    assert result.removable == ("g",) and result.gpu_nodes_needed == 1
    assert result.removable_gpu_hours == pytest.approx(8 * HOURS)


def test_a_pod_that_fits_no_node_is_unplaced_and_its_node_not_counted_free_for_it() -> None:
    objects = [
        node("a", 2),
        pod("big-7d9f8c-a", "a", {"nvidia.com/gpu": "2"}),
        pod("huge", "", {"nvidia.com/gpu": "4"}, owner=None),
    ]
    objects[-1]["status"] = {"phase": "Pending"}
    result = replay(objects, gpu("a", 0, 90.0), gpu("a", 1, 90.0))
    assert result.unplaced == ("ml/huge",) and result.gpu_nodes_needed == 1 and result.removable == ()


def test_daemonset_pods_finished_pods_and_cordoned_nodes() -> None:
    cordoned = node("c")
    cordoned["spec"] = {"unschedulable": True}
    plugin = pod("dcgm-x", "c", WHOLE, owner="DaemonSet", owner_name="dcgm")
    done = pod("old-7d9f8c-a", "c", WHOLE)
    done["status"] = {"phase": "Succeeded"}
    objects = [node("a"), cordoned, plugin, done, pod("llm-7d9f8c-a", "c", WHOLE)]
    result = replay(objects, gpu("c", 0, 60.0, fb_used_max=30_000.0, pods=frozenset({"ml/llm-7d9f8c-a"})))
    # the running pod leaves the cordoned node for a; the DaemonSet's and the finished pod are not replayed
    assert result.removable == ("c",) and result.gpu_nodes_needed == 1 and result.unplaced == ()


def test_the_removable_gpus_are_priced_by_model_and_spot(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("gpus:\n  - model: A100-SXM4-40GB\n    onDemand: 3.0\n    spot: 1.0\n")
    spot = node("s", spot=True)
    spot["spec"] = {"taints": [{"key": "node-type", "value": "spot", "effect": "NoSchedule"}]}
    objects = [node("a"), spot, pod("llm-7d9f8c-a", "a", WHOLE)]
    found = [gpu("a", 0, 70.0, fb_used_max=30_000.0, pods=frozenset({"ml/llm-7d9f8c-a"}))]
    result = replay(objects, *found, prices=read_prices(prices))
    # the pod does not tolerate the spot taint: s (no usage rows, priced by its nvidia.com/gpu.product label) is
    # left empty, 8 GPUs at the spot price for a week
    assert result.removable == ("s",)
    assert result.removable_cost == pytest.approx(8 * 1.0 * HOURS)


def test_the_replay_reads_the_policy_in_enforce_mode_and_changes_no_input() -> None:
    objects = [node("g", 8), node("m", 0, **MIG_RESOURCES), pod("embed-7d9f8c-a", "g", WHOLE)]
    before = json.dumps(objects, sort_keys=True)
    found = [gpu("g", 0, 10.0, fb_used_max=5000.0, pods=frozenset({"ml/embed-7d9f8c-a"})), gpu("m", 0, 40.0)]
    audited = replay(objects, *found, policy="mode: audit\n")
    assert audited.removable == ("g",)  # what gpupack would do once enforcing, not what audit mode changes
    assert json.dumps(objects, sort_keys=True) == before


def test_unbound_removes_only_the_gpus_the_advice_replaces() -> None:
    stored = pod("embed-7d9f8c-a", "g", WHOLE)
    plain = unbound(stored, None)
    assert "nodeName" not in plain["spec"] and "status" not in plain
    assert plain["spec"]["containers"][0]["resources"]["limits"] == WHOLE
    advised = unbound(stored, {"gpupack.io/workload": "inference"})
    assert advised["metadata"]["labels"]["gpupack.io/workload"] == "inference"
    assert "nvidia.com/gpu" not in advised["spec"]["containers"][0]["resources"]["limits"]
    assert advised["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert stored == copy.deepcopy(stored) and stored["spec"]["nodeName"] == "g"


def test_without_a_cluster_there_are_no_savings_and_a_bad_node_is_named() -> None:
    assert savings(inputs(usage(gpu("a", 0, 10.0)))) is None
    bad = node("x")
    bad["spec"] = {"taints": "all"}
    with pytest.raises(ClusterError, match=r"node x: spec\.taints must be a list"):
        savings(inputs(usage(gpu("a", 0, 10.0)), [bad]))


SHARED = {"nvidia.com/gpu.shared": "1"}


def t4(name: str) -> dict[str, Any]:
    """A T4 node: 4 GPUs time-sliced 4 ways, 16 replicas."""
    found = node(name, 0, **{"nvidia.com/gpu.shared": "16"})
    found["metadata"]["labels"].update({"nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"})
    return found


def test_work_without_pod_mapping_is_the_nodes_shared_by_what_each_pod_holds() -> None:
    # node a: 8 GPUs at 50 %, 4 GPUs' worth of work; p2 holds 2 whole GPUs, p1 one: 8/3 and 4/3.
    # node t: 4 T4s at 30 %, 1.2 GPUs' worth; three replicas of a quarter GPU each: 0.4 each
    objects = [
        node("a"),
        t4("t"),
        pod("p2-7d9f8c-a", "a", {"nvidia.com/gpu": "2"}),
        pod("p1-7d9f8c-a", "a", {"nvidia.com/gpu": "1"}),
        *(pod(f"r-7d9f8c-{i}", "t", SHARED) for i in range(3)),
    ]
    found = inputs(usage(*gpus("a", 8, 50.0), *gpus("t", 4, 30.0, model="Tesla T4")), objects)
    assert found.cluster is not None
    records = {
        n["metadata"]["name"]: node_from_json(n, found.policy) for n in gpu_nodes_of(found.cluster, found.policy)
    }
    work = pod_work(found, records, found.cluster.pods)
    assert work == pytest.approx(
        {"ml/p2-7d9f8c-a": 8 / 3, "ml/p1-7d9f8c-a": 4 / 3, **{f"ml/r-7d9f8c-{i}": 0.4 for i in range(3)}}
    )


def test_work_with_pod_mapping_is_each_gpus_shared_by_its_pods() -> None:
    # a GPU at 60 % mapped to two pods: 0.3 each; a 3g.20gb instance at 70 % engine activity: 0.7 x 3/7 = 0.3
    objects = [node("a"), pod("x-7d9f8c-a", "a", WHOLE), pod("y-7d9f8c-a", "a", WHOLE), pod("m-7d9f8c-a", "a", WHOLE)]
    both = frozenset({"ml/x-7d9f8c-a", "ml/y-7d9f8c-a"})
    instance = GpuUsage("a", "1", A100, "1", "3g.20gb", engine_mean=70.0, pods=frozenset({"ml/m-7d9f8c-a"}))
    found = inputs(usage(gpu("a", 0, 60.0, pods=both), instance), objects)
    assert found.cluster is not None
    work = pod_work(found, {}, found.cluster.pods)
    assert work == pytest.approx({"ml/x-7d9f8c-a": 0.3, "ml/y-7d9f8c-a": 0.3, "ml/m-7d9f8c-a": 0.3})


def test_a_node_given_more_work_than_its_gpus_is_overloaded() -> None:
    # two T4 nodes, 8 latency-tolerant replicas each, both nodes 90 % busy: 3.6 GPUs' worth of work each. The
    # extender packs the 16 replicas onto one node's 16 slots (it filters hot nodes only for latency-critical
    # pods): 7.2 GPUs of work on 4 GPUs, so the node freed is no saving, and the report says so
    tolerant = {"gpupack.io/workload": "inference", "gpupack.io/latency": "tolerant"}
    objects = [t4("t1"), t4("t2")]
    objects += [pod(f"ocr-7d9f8c-{n}{i}", n, SHARED, labels=tolerant) for n in ("t1", "t2") for i in range(8)]
    result = replay(objects, *gpus("t1", 4, 90.0), *gpus("t2", 4, 90.0))
    assert result.gpu_nodes_needed == 1 and len(result.overloaded) == 1 and result.removable != ()
    assert result.util_after == pytest.approx(100.0)  # the overloaded node's GPUs count as fully busy
    # at 40 % the same packing fits: 3.2 GPUs of work on 4
    calm = replay(objects, *gpus("t1", 4, 40.0), *gpus("t2", 4, 40.0))
    assert calm.overloaded == () and calm.util_after == pytest.approx(80.0)


def test_pods_the_window_does_not_measure_are_counted() -> None:
    # MIG GPUs under nvidia-smi read [N/A]: the node has no utilization, so its pods' work is unknown
    objects = [node("m", 0, **MIG_RESOURCES), pod("chat-7d9f8c-a", "m", {"nvidia.com/mig-1g.10gb": "1"})]
    result = replay(objects, gpu("m", 0, None))
    assert result.unmeasured_pods == 1 and result.gpu_nodes_needed == 1
