"""Fit rules, FGD's fragmentation worked out by hand, and each policy's choice on small clusters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpupack.extender.fragmentation import fragmentation, typical_shapes
from gpupack.simulator.cluster import ClusterState
from gpupack.simulator.fgd import FgdPolicy
from gpupack.simulator.policies import POLICIES
from gpupack.simulator.policy import PolicyContext, ScoredPolicy
from gpupack.simulator.protocol import build_arrivals
from gpupack.simulator.trace import MILLI, PodRecord, read_nodes, read_pods
from tests.test_simulator_kit import cluster, make_node, make_pod, set_gpus, shapes_for, tiebreak

TRACE = Path(__file__).resolve().parents[1] / "data/alibaba-gpu-v2023/csv"


@pytest.mark.parametrize(
    ("pod", "fits"),
    [
        (make_pod("cpu", cpu=4000), [True, False]),
        (make_pod("mem", mem=3000), [True, False]),
        (make_pod("whole", gpus=2), [True, False]),
        (make_pod("share-600", gpus=1, milli=600), [True, False]),
        (make_pod("share-300", gpus=1, milli=300), [True, True]),
        (make_pod("spec-p100", gpus=1, milli=300, spec=["P100"]), [False, True]),
        (make_pod("spec-any-of", gpus=1, milli=300, spec=["P100", "T4"]), [True, True]),
    ],
    ids=lambda v: v.name if isinstance(v, PodRecord) else None,
)
def test_fit_rules(pod: PodRecord, fits: list[bool]) -> None:
    state = cluster(
        make_node("t4", cpu=8000, mem=4000, gpus=2), make_node("p100", cpu=3000, mem=2000, gpus=2, model="P100")
    )
    set_gpus(state, 1, [400, 0])
    assert state.feasible(pod).tolist() == fits


def hand_shapes(state: ClusterState) -> list[PodRecord]:
    return (
        [make_pod("a", cpu=4000, gpus=1, milli=500)] * 3
        + [make_pod("b", cpu=2000)]
        + [make_pod("d", cpu=4000, gpus=2)]
        + [make_pod("e", cpu=4000, gpus=1, milli=500, spec=["P100"])]
    )


@pytest.mark.parametrize(
    ("cpu_free", "expected"),
    [
        # a (x3): fits on the 1000 GPU, the 300 GPU is fragment: 3 * 300; b (CPU-only): all 1300; d needs two whole
        # GPUs: 1300; e cannot use a T4: 1300.
        (8000, 3 * 300 + 1300 + 1300 + 1300),
        (3000, 3 * 1300 + 1300 + 1300 + 1300),  # too little CPU for a: all fragment
    ],
)
def test_fragmentation_by_hand(cpu_free: int, expected: int) -> None:
    state = cluster(make_node(cpu=8000, gpus=2))
    shapes = shapes_for(hand_shapes(state), state)
    assert shapes.total == 6
    frag = fragmentation(
        shapes, state.model_id, np.array([cpu_free], np.int64), np.array([[1000, 300] + [-1] * 6], np.int64)
    )
    assert frag.tolist() == [expected]


def test_typical_shapes_keep_the_most_frequent_until_the_coverage_with_the_authors_tie_order() -> None:
    pods = (
        [make_pod("x", cpu=1000, gpus=1, milli=200)] * 5
        + [make_pod("y", cpu=2000)] * 3
        + [make_pod("z", cpu=3000, gpus=1)]
        + [make_pod("w", cpu=4000, gpus=1)]
    )
    models = ("T4",)
    shapes = [p.shape for p in pods]
    assert len(typical_shapes(shapes, models, 0.95).keys) == 4
    assert typical_shapes(shapes, models, 0.8).keys == ((1000, 200, 1, ()), (2000, 0, 0, ()))
    assert typical_shapes(shapes, models, 0.85).keys[-1] == (
        4000,
        1000,
        1,
        (),
    )  # tie on count: larger CPU first


def test_default_trace_has_the_papers_35_typical_shapes() -> None:
    pods = read_pods(TRACE / "openb_pod_list_default.csv")
    shapes = typical_shapes((p.shape for p in pods), ("G2", "T4"))
    assert len(shapes.keys) == 35 and shapes.total == 7766


def context(state: ClusterState, shapes_from: list[PodRecord], order: np.ndarray, seed: int = 0) -> PolicyContext:  # type: ignore[type-arg]
    return PolicyContext(np.random.default_rng(seed), order, shapes_for(shapes_from, state), state)


@pytest.mark.parametrize(
    ("policy", "node"),
    [
        ("bestfit", 0),
        ("binpack", 0),
        ("dotproduct", 0),
        ("spread", 1),
        ("fgd", 0),
        ("gpupack", 0),
        ("gpupack-autoscaled", 0),
    ],
)
def test_one_gpu_pod_between_a_nearly_full_node_and_an_empty_one(policy: str, node: int) -> None:
    state = cluster(make_node("full"), make_node("empty"))
    set_gpus(state, 0, [0] * 7 + [1000])
    shapes = [make_pod("one", gpus=1), make_pod("eight", gpus=8)]
    chosen = POLICIES[policy](context(state, shapes, tiebreak(0, 1))).choose(
        make_pod("p", gpus=1), state, state.feasible(make_pod("p", gpus=1))
    )
    assert chosen is not None and chosen.node == node


@pytest.mark.parametrize(
    ("policy", "gpu"), [("bestfit", 1), ("spread", 1), ("dotproduct", 1), ("fgd", 0), ("gpupack", 1)]
)
def test_sharing_gpu_choice_inside_the_node(policy: str, gpu: int) -> None:
    # Best fit packs 500 onto the 600 GPU (leaving a useless 100); FGD keeps both GPUs able to host 500 shares.
    # gpupack cannot choose: the device plugin's packed allocation gives the fullest GPU that fits, as best fit.
    state = cluster(make_node(gpus=2))
    set_gpus(state, 0, [1000, 600])
    pod = make_pod("p", gpus=1, milli=500)
    chosen = POLICIES[policy](context(state, [pod], tiebreak(0))).choose(pod, state, state.feasible(pod))
    assert chosen is not None and chosen.gpus == (gpu,)


@pytest.mark.parametrize(("policy", "node"), [("fgd", 0), ("gpupack", 1), ("gpupack-autoscaled", 1)])
def test_a_cpu_pod_goes_where_no_free_gpu_is_left_when_fgd_ties(policy: str, node: int) -> None:
    # Both nodes keep every typical pod able to fit (FGD: 50 and 50); the run's order favours node 0. gpupack
    # breaks the tie on purpose: the node whose GPUs are all taken, so node 0's free GPUs keep their CPU.
    state = cluster(make_node("free"), make_node("taken"))
    set_gpus(state, 1, [0] * 8)
    pod = make_pod("cpu", cpu=1000)
    chosen = POLICIES[policy](context(state, [make_pod("one", gpus=1)], tiebreak(1, 0))).choose(
        pod, state, state.feasible(pod)
    )
    assert chosen is not None and chosen.node == node


def test_random_draws_feasible_nodes_and_fitting_gpus() -> None:
    state = cluster(make_node("a", gpus=2), make_node("b", gpus=2), make_node("c", gpus=2))
    set_gpus(state, 2, [100, 100])
    pod = make_pod("p", gpus=1, milli=500)
    policy = POLICIES["random"](context(state, [pod], tiebreak(0, 1, 2)))
    picks = {(c.node, c.gpus) for c in (policy.choose(pod, state, state.feasible(pod)) for _ in range(60)) if c}
    assert picks == {(0, (0,)), (0, (1,)), (1, (0,)), (1, (1,))}


@pytest.mark.parametrize(("order", "node"), [((5, 9), 1), ((9, 5), 0)])
def test_ties_go_to_the_runs_node_order(order: tuple[int, int], node: int) -> None:
    state = cluster(make_node("a"), make_node("b"))
    pod = make_pod("p", gpus=1)
    for name in ("fgd", "bestfit", "spread", "gpupack", "gpupack-autoscaled"):
        chosen = POLICIES[name](context(state, [pod], tiebreak(*order))).choose(pod, state, state.feasible(pod))
        assert chosen is not None and chosen.node == node, name


def test_fgd_scores_are_integers_50_when_fragmentation_does_not_change() -> None:
    state = cluster(make_node("a", gpus=2), make_node("b", gpus=2))
    set_gpus(state, 1, [1000, 300])
    shapes = [make_pod("share", gpus=1, milli=300)]
    policy = FgdPolicy(shapes_for(shapes, state), tiebreak(0, 1))
    cpu_scores, _ = policy.node_scores(make_pod("cpu-only"), state)
    assert cpu_scores.tolist() == [50, 50]
    # Every GPU still hosts a 300 share before and after: no fragment either way, 50, lowest GPU on ties.
    scores, gpus = policy.node_scores(make_pod("share", gpus=1, milli=300), state)
    assert scores.tolist() == [50, 50] and gpus.tolist() == [0, 0]
    big = make_pod("big", gpus=1, milli=800)
    scores, gpus = policy.node_scores(big, state)
    x = 200 / 1000  # on a: the 1000 GPU keeps 200 free, below 300: +200 fragment
    assert scores[0] == int(1 / (1 + np.exp(x)) * 100) and gpus.tolist() == [0, 0]


def test_fgd_cached_scores_equal_fresh_ones_after_many_placements() -> None:
    state = ClusterState(read_nodes(TRACE / "openb_node_list_gpu_node.csv"))
    pods = read_pods(TRACE / "openb_pod_list_gpuspec25.csv")
    shapes = typical_shapes((p.shape for p in pods), state.models)
    order = np.random.default_rng(1).permutation(state.size).astype(np.int64)
    policy = FgdPolicy(shapes, order)
    arrivals = build_arrivals(pods, state.total_gpus * MILLI, np.random.default_rng(1))
    for pod in arrivals[:700]:
        chosen = policy.choose(pod, state, state.feasible(pod))
        if chosen is not None:
            state.place(pod, chosen)
    fresh = FgdPolicy(shapes, order)
    for pod in arrivals[700:760]:
        cached_scores, cached_gpus = policy.node_scores(pod, state)
        fresh_scores, fresh_gpus = fresh.node_scores(pod, state)
        assert np.array_equal(cached_scores, fresh_scores) and np.array_equal(cached_gpus, fresh_gpus)


def test_a_new_policy_plugs_in_as_a_node_scorer() -> None:
    state = cluster(make_node("a"), make_node("b"), make_node("c"))

    def prefer_last(pod: PodRecord, state: ClusterState, nodes: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return nodes.astype(np.int64)

    registry = {**POLICIES, "last": lambda ctx: ScoredPolicy(prefer_last, ctx.tiebreak)}
    pod = make_pod("p", gpus=1, milli=250)
    chosen = registry["last"](context(state, [pod], tiebreak(2, 1, 0))).choose(pod, state, state.feasible(pod))
    assert chosen is not None and (chosen.node, chosen.gpus) == (2, (0,))
