"""The layout program: small demands worked out by hand, an independent search for the fewest GPUs on random small
demands, busy nodes left alone, several GPU models, and the demand's mix spread over free GPUs (`fill`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cache

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupack.core.gpus.catalog import CATALOG
from gpupack.core.gpus.geometry import Counts, check, counts_of
from gpupack.migplan.config import config_name, entries, mig_parted_config
from gpupack.migplan.solve import MigNode, Plan, PlanError, plan
from tests.test_migplan_geometry import fits

M = "nvidia.com/mig-"


def nodes(n: int, model: str = "A100-40GB", gpus: int = 8, prefix: str = "a") -> list[MigNode]:
    return [MigNode(f"{prefix}{i}", model, gpus, True) for i in range(1, n + 1)]


def demand(**counts: int) -> dict[str, int]:
    return {M + name.replace("_", "."): n for name, n in counts.items()}


def served(result: Plan) -> dict[str, int]:
    total: dict[str, int] = {}
    for node in result.nodes:
        for r, n in node.instances.items():
            total[r] = total.get(r, 0) + n
    return total


def assert_legal_and_serving(result: Plan, asked: Mapping[str, int], kept: Mapping[str, int] | None = None) -> None:
    for node in result.nodes:
        for layout in node.per_gpu:
            check(node.model, dict(layout))
    have = served(result)
    for r, n in asked.items():
        assert have.get(r, 0) + (kept or {}).get(r, 0) + result.unserved.get(r, 0) >= n, (r, have)


@pytest.mark.parametrize(
    ("asked", "gpus"),
    [
        (demand(**{"1g_5gb": 7}), 1),  # seven 1-slice instances: one GPU, slice 7 unused
        (demand(**{"1g_5gb": 8}), 2),
        (demand(**{"3g_20gb": 3}), 2),
        (demand(**{"1g_5gb": 2, "2g_10gb": 1, "3g_20gb": 1}), 1),  # all-balanced, exactly
        (demand(**{"4g_20gb": 1, "3g_20gb": 1, "1g_5gb": 1}), 2),  # the 4g and the 3g fill a GPU
        (demand(**{"2g_10gb": 3, "1g_5gb": 1}), 1),  # 2g at 0, 2, 4 and the 1g at 6
        (demand(**{"2g_10gb": 3, "1g_5gb": 2}), 2),
        # 230 memory slices: at least 29 GPUs; 12 GPUs of 2x 3g, one 3g + 1g.10gb pair per GPU elsewhere...
        (demand(**{"1g_5gb": 60, "1g_10gb": 35, "3g_20gb": 25}), 29),
    ],
)
def test_hand_worked_demands_take_the_fewest_gpus(asked: dict[str, int], gpus: int) -> None:
    result = plan(asked, nodes(6))
    assert result.gpus_needed == gpus
    assert result.nodes_needed == -(-gpus // 8)
    assert not result.unserved
    assert_legal_and_serving(result, asked)


def test_a_demand_that_is_one_stock_layout_gets_its_stock_name() -> None:
    result = plan(demand(**{"1g_5gb": 16, "2g_10gb": 8, "3g_20gb": 8}), nodes(2))
    (node,) = result.nodes
    assert config_name(node) == "all-balanced"
    assert mig_parted_config(result.nodes) == {"version": "v1", "mig-configs": {}}  # nothing beyond the stock ones
    assert result.idle == ("a2",)


def test_fewer_gpus_first_then_fewer_nodes() -> None:
    """Eight GPUs of demand: one 8-GPU node rather than four 2-GPU ones (the same GPUs, fewer nodes)."""
    cluster = nodes(4, gpus=2, prefix="small") + nodes(1, gpus=8, prefix="big")
    result = plan(demand(**{"3g_20gb": 16}), cluster)
    assert result.gpus_needed == 8 and result.nodes_needed == 1
    assert [n.node for n in result.nodes] == ["big1"]


def test_busy_nodes_keep_their_layout_and_count_towards_the_demand() -> None:
    busy = MigNode("busy", "A100-40GB", 8, False, "all-balanced", {M + "1g.5gb": 16, M + "3g.20gb": 8})
    result = plan(demand(**{"1g_5gb": 20, "3g_20gb": 8}), [busy, *nodes(2)])
    assert result.kept == ("busy",)
    assert "busy" not in {n.node for n in result.nodes}
    assert result.gpus_needed == 1  # only 4 more 1g.5gb are needed
    assert_legal_and_serving(result, demand(**{"1g_5gb": 20, "3g_20gb": 8}), busy.offered)


def test_what_no_free_gpu_can_hold_is_reported_unserved() -> None:
    result = plan(demand(**{"3g_20gb": 40}), nodes(2))
    assert result.unserved == {M + "3g.20gb": 8}
    assert result.gpus_needed == 16
    busy_only = plan(demand(**{"3g_20gb": 1}), [MigNode("b", "A100-40GB", 8, False)])
    assert busy_only.unserved == {M + "3g.20gb": 1} and not busy_only.nodes


def test_each_profile_goes_to_the_model_that_has_it() -> None:
    cluster = nodes(1, "A100-40GB", prefix="forty") + nodes(1, "A100-80GB", prefix="eighty")
    result = plan(demand(**{"1g_5gb": 7, "3g_40gb": 2}), cluster)
    by_node = {n.node: n for n in result.nodes}
    assert set(by_node["forty1"].instances) == {M + "1g.5gb"}
    assert set(by_node["eighty1"].instances) == {M + "3g.40gb"}
    assert config_name(by_node["eighty1"]) == "all-3g.40gb"
    assert result.gpus_needed == 2 and result.nodes_needed == 2


def test_a_shared_profile_name_is_served_by_either_model_with_its_own_geometry() -> None:
    """`1g.10gb` is 2 of 8 slices on an A100-40GB (4 per GPU) and 1 on an A100-80GB (7 per GPU)."""
    result = plan(demand(**{"1g_10gb": 7}), nodes(1, "A100-40GB", prefix="forty") + nodes(1, "A100-80GB", prefix="e"))
    assert result.gpus_needed == 1
    (node,) = result.nodes
    assert node.model == "A100-80GB" and node.per_gpu[0] == counts_of({"1g.10gb": 7})


def test_nothing_asked_changes_nothing() -> None:
    result = plan({}, nodes(2))
    assert result.nodes == () and result.gpus_needed == 0 and result.idle == ("a1", "a2")


@pytest.mark.parametrize("bad", [{"nvidia.com/gpu": 1}, {M + "1g.5gb": -1}])
def test_a_demand_that_is_not_mig_instances_is_refused(bad: dict[str, int]) -> None:
    with pytest.raises(PlanError, match="MIG resources"):
        plan(bad, nodes(1))


def test_a_node_listed_twice_is_refused() -> None:
    with pytest.raises(PlanError, match="twice"):
        plan(demand(**{"1g_5gb": 1}), nodes(1) + nodes(1))


def test_fill_spreads_the_demands_mix_over_every_free_gpu() -> None:
    asked = demand(**{"1g_5gb": 12, "1g_10gb": 7, "3g_20gb": 5})
    lean = plan(asked, nodes(6))
    full = plan(asked, nodes(6), fill=True)
    assert full.gpus_needed == lean.gpus_needed  # what the demand needs does not change
    assert {n.node for n in full.nodes} == {f"a{i}" for i in range(1, 7)} and not full.idle
    have = served(full)
    factor = min(have[r] / n for r, n in asked.items())
    assert factor >= 6 * 8 / lean.gpus_needed * 0.8  # close to the free GPUs over what 1x needs
    assert_legal_and_serving(full, asked)


def test_mixed_node_layouts_list_their_gpu_indices() -> None:
    a, b = counts_of({"3g.20gb": 2}), counts_of({"1g.5gb": 7})
    assert entries((a, a, b)) == [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
    ]
    assert entries((a, a)) == [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]


PROFILES = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb"]


@cache
def oracle_maximal(wanted: tuple[str, ...]) -> list[dict[str, int]]:
    """Independent of `gpupack.core.gpus.geometry`: every count vector of the wanted profiles the slice-by-slice
    oracle of test_migplan_geometry places, kept when no wanted instance can be added."""
    profiles = {p.name: p for p in CATALOG["A100-40GB"]}
    ranges = [range(profiles[name].max_instances + 1) for name in wanted]
    legal = [
        counts
        for combo in itertools.product(*ranges)
        if any(combo) and fits(counts := {n: c for n, c in zip(wanted, combo, strict=True) if c}, profiles)
    ]
    return [c for c in legal if not any(fits({**c, w: c.get(w, 0) + 1}, profiles) for w in wanted)]


@cache
def fewest_gpus(asked: tuple[int, ...]) -> int:
    """Oracle: the fewest A100-40GB GPUs covering `asked` (per PROFILES), by exhaustive search over the oracle's
    maximal layouts."""
    if not any(asked):
        return 0
    wanted = tuple(p for p, n in zip(PROFILES, asked, strict=True) if n)
    best = 10**9
    for layout in oracle_maximal(wanted):
        rest = tuple(max(0, n - layout.get(p, 0)) for p, n in zip(PROFILES, asked, strict=True))
        if rest != asked:
            best = min(best, 1 + fewest_gpus(rest))
    return best


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.integers(0, 5) for _ in PROFILES]))
def test_the_program_finds_the_fewest_gpus_an_exhaustive_search_finds(asked: tuple[int, ...]) -> None:
    wanted = {M + p: n for p, n in zip(PROFILES, asked, strict=True) if n}
    result = plan(wanted, nodes(4))
    assert result.gpus_needed == fewest_gpus(asked)
    assert not result.unserved
    assert_legal_and_serving(result, wanted)


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*PROFILES, "3g.40gb", "2g.20gb"]), st.integers(0, 40), max_size=4),
    st.lists(st.sampled_from(["A100-40GB", "A100-80GB", "H100-80GB"]), min_size=1, max_size=4),
    st.booleans(),
)
def test_every_plan_is_legal_and_accounts_for_every_instance(
    counts: dict[str, int], models: list[str], fill: bool
) -> None:
    cluster = [MigNode(f"n{i}", m, 8 if i % 2 else 4, True) for i, m in enumerate(models)]
    asked = {M + p: n for p, n in counts.items()}
    result = plan(asked, cluster, fill=fill)
    assert_legal_and_serving(result, asked)
    assert result.gpus_needed <= sum(n.gpus for n in cluster)
    # an instance is left unserved only when every GPU that could hold its profile is already taken
    for resource in result.unserved:
        able = [n for n in cluster if resource.removeprefix(M) in {p.name for p in CATALOG[n.model]}]
        planned = {p.node: p for p in result.nodes}
        assert all(n.name in planned for n in able), (resource, result)
    names: list[Counts] = [layout for n in result.nodes for layout in n.per_gpu]
    assert all(layout for layout in names)  # no GPU of a planned node is left without instances


def test_a_node_that_already_holds_a_planned_layout_keeps_it() -> None:
    """Planning again after the cluster changed moves no layout from the node that holds it to another."""
    balanced = {M + "1g.5gb": 16, M + "2g.10gb": 8, M + "3g.20gb": 8}
    cluster = [*nodes(2), MigNode("a3", "A100-40GB", 8, True, "all-balanced", balanced)]
    result = plan(demand(**{"1g_5gb": 16, "2g_10gb": 8, "3g_20gb": 8}), cluster)
    assert [(n.node, config_name(n)) for n in result.nodes] == [("a3", "all-balanced")]
    assert result.idle == ("a1", "a2")
    # without such a node, the first by name
    assert [n.node for n in plan(demand(**{"1g_5gb": 16, "2g_10gb": 8, "3g_20gb": 8}), nodes(3)).nodes] == ["a1"]


def test_the_merged_config_map_keeps_the_admins_layouts_and_metadata_but_not_kubectls_last_applied_copy() -> None:
    """A ConfigMap made with `kubectl apply` carries its old content in an annotation: written back it would show
    the old layouts beside the new in the file the admin reviews."""
    from gpupack.migplan.config import LAST_APPLIED, merged_config_map

    (planned,) = plan(demand(**{"1g_10gb": 2, "3g_20gb": 1}), nodes(1)).nodes
    old = "version: v1\nmig-configs:\n  all-balanced: []\n"
    live = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "layouts",
            "namespace": "gpu-operator",
            "labels": {"team": "gpu"},
            "annotations": {LAST_APPLIED: '{"data": {"config.yaml": "old"}}', "owner": "platform"},
            "resourceVersion": "42",
            "uid": "u-1",
        },
        "data": {"config.yaml": old, "notes": "kept"},
    }
    merged = merged_config_map(live, [planned])
    assert merged["metadata"] == {
        "name": "layouts",
        "namespace": "gpu-operator",
        "labels": {"team": "gpu"},
        "annotations": {"owner": "platform"},
    }
    assert merged["data"]["notes"] == "kept"
    layouts = yaml.safe_load(merged["data"]["config.yaml"])["mig-configs"]
    assert layouts == {"all-balanced": [], **mig_parted_config([planned])["mig-configs"]}
    del live["metadata"]["annotations"]["owner"]
    assert "annotations" not in merged_config_map(live, [planned])["metadata"]
