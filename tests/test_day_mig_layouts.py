"""MIG layouts in the synthetic day (issue 15): stock and explicit layouts, per-node overrides, the webhook's
sizing over what the nodes advertise, and the layout comparison."""

from __future__ import annotations

from typing import Any

import pytest

from gpupack.core import contract
from gpupack.core.gpus.geometry import Counts, counts_of
from gpupack.core.gpus.stock import stock_for
from gpupack.core.policy import Policy
from gpupack.extender.inventory import node_from_json
from gpupack.simulator.day.cluster import NodeLayout, cluster_nodes, replica_pod
from gpupack.simulator.day.layouts import (
    best_stock,
    candidate_layouts,
    compare_layouts,
    meets_target,
    render_table,
    run_candidate,
    stock_candidates,
)
from gpupack.simulator.day.scenario import MIG_MODEL, Scenario, ScenarioError, load_scenario, parse_scenario
from gpupack.simulator.day.simulate import DEFAULT_SCENARIO, _Day, run_day

SMALL = 0.5
"""The shipped example at half size, as tests/test_day.py runs it."""
MIXED: tuple[Counts, ...] = (counts_of({"3g.20gb": 2}), counts_of({"1g.10gb": 4}))
"""Two GPUs holding different layouts."""


def mig_day(layout: Any = None, gpus: int = 2, **group: Any) -> Scenario:
    """One a100-mig node of `gpus` GPUs (plus an H100 node) and one 8Gi Deployment of 2 replicas, 1 hour."""
    node: dict[str, Any] = {"name": "a100-mig", "count": 1, "gpu": "a100-mig", "gpus": gpus, **group}
    if layout is not None:
        node["migLayout"] = layout
    doc = {
        "name": "mig",
        "hours": 1,
        "nodes": [node, {"name": "h100", "count": 1, "gpu": "h100", "gpus": 2}],
        "inference": [{"name": "chat", "peakReplicas": 2, "troughReplicas": 2, "gpuMemory": "8Gi"}],
    }
    return parse_scenario(doc, "mig.yaml")


def mig_node(scenario: Scenario, **kw: Any) -> dict[str, Any]:
    return next(n for n in cluster_nodes(scenario, **kw) if n["metadata"]["name"].startswith("a100-mig"))


def gpu_allocatable(node: dict[str, Any]) -> dict[str, int]:
    return {r: int(v) for r, v in node["status"]["allocatable"].items() if r.startswith("nvidia.com/")}


def chat_resource(scenario: Scenario, layouts: Any = None) -> str:
    """The GPU resource the webhook gives an 8Gi replica in the day's cluster."""
    pod = _Day(scenario, "gpupack", layouts).through_webhook(replica_pod(scenario.inference[0], 1))
    assert pod is not None
    (resource,) = (r for r in pod["spec"]["containers"][0]["resources"]["limits"] if r.startswith("nvidia.com/"))
    return resource


@pytest.fixture(scope="module")
def small() -> Scenario:
    return load_scenario(DEFAULT_SCENARIO).with_changes(scale=SMALL)


# layouts from the scenario ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(stock_for(MIG_MODEL)))
def test_every_stock_layout_gives_its_instances_on_every_gpu(name: str) -> None:
    node = mig_node(mig_day(name, gpus=3))
    expected = {contract.mig_resource(p): 3 * n for p, n in stock_for(MIG_MODEL)[name]}
    assert gpu_allocatable(node) == expected
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == name


def test_without_a_layout_a_group_is_all_balanced() -> None:
    node = mig_node(mig_day(None, gpus=2))
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
    assert gpu_allocatable(node) == {
        "nvidia.com/mig-1g.5gb": 4,
        "nvidia.com/mig-2g.10gb": 2,
        "nvidia.com/mig-3g.20gb": 2,
    }


def test_an_explicit_layout_sums_its_gpus_and_takes_its_name() -> None:
    doc = [{"3g.20gb": 2}, {"1g.10gb": 4}]
    node = mig_node(mig_day(doc, migConfig="plan-a"))
    assert gpu_allocatable(node) == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.20gb": 2}
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "plan-a"


@pytest.mark.parametrize(
    ("layout", "label"),
    [
        ([{"1g.10gb": 4}, {"1g.10gb": 4}], "all-1g.10gb"),  # what it amounts to is a stock layout: its name
        ([{"3g.20gb": 2}, {"1g.10gb": 4}], None),
    ],
)
def test_an_unnamed_explicit_layout_gets_a_label_value(layout: list[dict[str, int]], label: str | None) -> None:
    value = mig_node(mig_day(layout))["metadata"]["labels"]["nvidia.com/mig.config"]
    if label is not None:
        assert value == label
    else:
        assert value.startswith("gpupack-a100-40gb-") and len(value) <= 63
        other = mig_node(mig_day([{"3g.20gb": 2}, {"1g.10gb": 3}]))["metadata"]["labels"]["nvidia.com/mig.config"]
        assert other != value  # the name follows the content


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (
            {"migLayout": [{"1g.5gb": 7}, {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}]},
            "nodes.0.migLayout: Value error, GPU 1: one A100-40GB cannot hold 1x 1g.5gb, 1x 3g.20gb, 1x 4g.20gb",
        ),
        ({"migLayout": [{"1g.5gb": 8}, {}]}, "GPU 0: A100-40GB holds at most 7 1g.5gb, not 8"),
        ({"migLayout": [{"1g.20gb": 1}, {}]}, "GPU 0: A100-40GB has no MIG profile 1g.20gb"),
        ({"migLayout": [{"1g.5gb": 7}]}, "nodes.0: Value error, migLayout lists 1 GPU layouts for 2 GPUs"),
        ({"migLayout": "all-1g.20gb"}, "'all-1g.20gb' is not a stock layout of the A100-40GB"),
        ({"migLayout": [{"1g.5gb": "7"}, {}]}, "nodes.0.migLayout"),
        ({"migLayout": "all-balanced", "migConfig": "mine"}, "migConfig names an explicit migLayout list"),
        ({"migLayout": [{}, {}], "migConfig": "not a label"}, "nodes.0.migConfig: String should match pattern"),
    ],
)
def test_an_impossible_layout_is_refused_naming_the_field_and_why(group: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=r"^mig\.yaml: ") as info:
        mig_day(**group)
    assert message in str(info.value)


def test_a_layout_on_a_node_without_mig_is_refused() -> None:
    doc = {"name": "x", "nodes": [{"name": "h", "count": 1, "gpu": "h100", "migLayout": "all-1g.10gb"}]}
    with pytest.raises(ScenarioError, match="migLayout applies to a100-mig groups, not h100"):
        parse_scenario(doc, "x.yaml")


# per-node overrides ----------------------------------------------------------------------------------------
def test_a_per_node_layout_replaces_only_that_nodes() -> None:
    scenario = mig_day("all-balanced").model_copy(
        update={"nodes": [mig_day().nodes[0].model_copy(update={"count": 2})]}
    )
    nodes = {n["metadata"]["name"]: n for n in cluster_nodes(scenario, layouts={"a100-mig-2": ("plan-b", MIXED)})}
    assert nodes["a100-mig-2"]["metadata"]["labels"]["nvidia.com/mig.config"] == "plan-b"
    assert gpu_allocatable(nodes["a100-mig-2"]) == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.20gb": 2}
    assert nodes["a100-mig-1"]["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
    assert gpu_allocatable(nodes["a100-mig-1"])["nvidia.com/mig-2g.10gb"] == 2


def test_without_gpupack_per_node_layouts_are_ignored() -> None:
    node = mig_node(mig_day(), partitioned=False, layouts={"a100-mig-1": ("plan-b", MIXED)})
    assert gpu_allocatable(node) == {contract.RESOURCE_GPU: 2}


@pytest.mark.parametrize(
    ("layouts", "message"),
    [
        ({"a100-mig-9": ("p", MIXED)}, "layouts: no node a100-mig-9 in scenario mig"),
        ({"h100-1": ("p", MIXED)}, "layouts: h100-1 is a h100 node"),
        ({"a100-mig-1": ("p", MIXED[:1])}, "layouts: a100-mig-1 has 2 GPUs, the layout lists 1"),
        ({"a100-mig-1": ("p", (MIXED[0], counts_of({"7g.40gb": 1, "1g.5gb": 1})))}, "a100-mig-1 GPU 1: one A100"),
        ({"a100-mig-1": ("p q", MIXED)}, "'p q' is not a label value"),
        ({"a100-mig-1": ("p" * 64, MIXED)}, "is not a label value"),
    ],
)
def test_a_bad_per_node_layout_is_refused(layouts: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=r"^layouts: ") as info:
        cluster_nodes(mig_day(), layouts=layouts)
    assert message in str(info.value)


def test_the_extender_counts_each_profile_by_its_memory_slices() -> None:
    node = node_from_json(mig_node(mig_day([{"1g.10gb": 4}, {"3g.20gb": 1, "1g.5gb": 4}])), Policy())
    assert node.gpu_model == MIG_MODEL
    assert dict(node.shares) == {"nvidia.com/mig-1g.10gb": 2 / 8, "nvidia.com/mig-1g.5gb": 1 / 8,
                                 "nvidia.com/mig-3g.20gb": 4 / 8}  # fmt: skip
    assert node.gpu_capacity == pytest.approx(2.0)


# the webhook's sizing follows the advertised profiles ------------------------------------------------------
@pytest.mark.parametrize(
    ("layout", "resource"),
    [
        ("all-balanced", "nvidia.com/mig-2g.10gb"),
        ("all-1g.10gb", "nvidia.com/mig-1g.10gb"),  # 10 GB like 2g.10gb, one compute slice instead of two
        ("all-1g.5gb", contract.RESOURCE_GPU),  # 8Gi fits no offered profile: a whole GPU
        ("all-7g.40gb", "nvidia.com/mig-7g.40gb"),
    ],
)
def test_an_8gi_replica_gets_the_smallest_profile_some_node_advertises(layout: str, resource: str) -> None:
    assert chat_resource(mig_day(layout)) == resource


def test_with_mixed_layouts_the_smallest_profile_of_any_node_is_chosen() -> None:
    scenario = mig_day("all-balanced").model_copy(
        update={"nodes": [mig_day().nodes[0].model_copy(update={"count": 2})]}
    )
    assert chat_resource(scenario) == "nvidia.com/mig-2g.10gb"
    assert chat_resource(scenario, {"a100-mig-2": ("plan-b", MIXED)}) == "nvidia.com/mig-1g.10gb"


def test_an_8gi_replica_runs_on_its_1g_10gb_slice() -> None:
    result = run_day(mig_day("all-1g.10gb"), "gpupack")
    summary = result.summary()
    assert summary["pending_pod_minutes"] == 0 and summary["gpu_nodes_peak"] == 1
    assert summary["busy_gpu_hours"] == pytest.approx(2 * 0.25 * 0.2, abs=0.05)  # 2 replicas x 1/4 GPU x ~20 %


# the comparison --------------------------------------------------------------------------------------------
def test_a_stock_candidate_sets_every_mig_node(small: Scenario) -> None:
    layouts = candidate_layouts(small, "all-3g.20gb")
    assert sorted(layouts) == ["a100-mig-1", "a100-mig-2", "a100-mig-3"]
    assert all(v == NodeLayout("all-3g.20gb", (counts_of({"3g.20gb": 2}),) * 8) for v in layouts.values())
    with pytest.raises(ScenarioError, match=r"'all-3g\.40gb' is not a stock layout of the A100-40GB"):
        compare_layouts(small, {"x": "all-3g.40gb"})


def test_the_default_day_is_unchanged_and_is_all_balanced(small: Scenario) -> None:
    summary = run_day(small, "gpupack").summary()
    # the numbers of the day before MIG layouts were configurable (commit 9673a31)
    assert (summary["gpu_hours"], summary["gpu_nodes_peak"], summary["gpu_nodes_mean"]) == (729.2, 11, 7.44)
    assert (summary["billed_gpu_hours"], summary["peak_gpus_in_use"], summary["pods_created"]) == (1202.9, 53, 478)
    numbers = run_candidate(small, "all-balanced")
    assert {k: v for k, v in numbers.items() if k != "stock"} == {k: summary[k] for k in numbers if k != "stock"}


def test_compare_layouts_in_processes_gives_the_serial_numbers(small: Scenario) -> None:
    per_node = {"a100-mig-1": ("plan", (counts_of({"1g.5gb": 6, "1g.10gb": 1}),) * 4 + (MIXED[0], MIXED[1]) * 2)}
    candidates = {"all-balanced": "all-balanced", "all-1g.10gb": "all-1g.10gb", "planned": per_node}
    serial = compare_layouts(small, candidates, jobs=1)
    assert compare_layouts(small, candidates, jobs=2) == serial
    assert list(serial) == list(candidates)
    assert serial["planned"]["stock"] is None and serial["all-1g.10gb"]["stock"] == "all-1g.10gb"
    assert serial["all-1g.10gb"] != serial["all-balanced"]  # the layout changes the day
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        compare_layouts(small, candidates, jobs=0)


def row(stock: str | None, peak: int, pending: float, mean: float = 5.0) -> dict[str, Any]:
    return {
        "stock": stock,
        "gpu_nodes_peak": peak,
        "gpu_nodes_mean": mean,
        "pending_pod_minutes": pending,
        "mig_nodes_peak": 3,
        "mig_nodes_mean": 2.5,
        "pending_at_end": 0,
        "gpu_hours": 100.0,
        "billed_gpu_hours": 120.0,
        "peak_gpus_in_use": 40,
    }


def test_the_best_stock_layout_leaves_fewest_pods_pending_then_needs_fewest_nodes() -> None:
    results = {
        "all-1g.5gb": row("all-1g.5gb", 9, 500.0),  # fewer nodes only because pods wait
        "all-balanced": row("all-balanced", 12, 10.0),
        "all-1g.10gb": row("all-1g.10gb", 11, 10.0),
        "planned": row(None, 8, 0.0),  # not stock: never the bar
    }
    assert best_stock(results) == "all-1g.10gb"
    assert best_stock({"planned": results["planned"]}) is None
    bar = results["all-1g.10gb"]
    assert meets_target(results["planned"], bar)
    assert not meets_target(row(None, 11, 0.0), bar)  # as many nodes
    assert not meets_target(row(None, 10, 11.0), bar)  # more pending
    table = render_table(results).splitlines()
    assert table[0].split()[:3] == ["layout", "nodes", "peak"]
    assert table[3].startswith("all-1g.10gb") and table[3].endswith("best stock")
    assert table[4].startswith("planned") and table[4].endswith("meets target")
    assert not table[1].endswith("target") and not table[2].endswith("target")


def test_stock_candidates_are_the_a100_40gb_layouts() -> None:
    assert set(stock_candidates()) == set(stock_for(MIG_MODEL)) and "all-balanced" in stock_candidates()
