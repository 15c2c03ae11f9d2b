"""The published protocol on hand-made lists and clusters: inflation, arrivals, failures and the metrics."""

from __future__ import annotations

import numpy as np
import pytest

from gpupack.simulator.cluster import Placement, PlacementError
from gpupack.simulator.metrics import FragmentationMeter, arrived_points, point_metrics, window
from gpupack.simulator.policies import POLICIES
from gpupack.simulator.policy import PolicyContext
from gpupack.simulator.protocol import build_arrivals, run_protocol
from tests.test_simulator_kit import cluster, make_node, make_pod, set_gpus, shapes_for


def test_arrivals_start_with_the_originals_shuffled_then_clones_up_to_the_target() -> None:
    pods = [make_pod("b", gpus=1), make_pod("a"), make_pod("c", gpus=1, milli=500)]
    arrivals = build_arrivals(pods, capacity_milli=4000, rng=np.random.default_rng(1), ratio=1.3)
    assert sorted(p.name for p in arrivals[:3]) == ["a", "b", "c"]
    clones = arrivals[3:]
    assert clones and all("-tuned-" in p.name for p in clones)
    assert [int(p.name.rsplit("-", 1)[1]) for p in clones] == list(range(len(clones)))
    total = sum(p.gpu_request_milli for p in arrivals)
    assert 5200 - 1000 < total <= 5200


def test_same_seed_gives_the_same_arrivals() -> None:
    pods = [make_pod(f"p{i}", gpus=1, milli=100 * (i + 1)) for i in range(9)]
    first = build_arrivals(pods, 10_000, np.random.default_rng(7))
    assert first == build_arrivals(pods, 10_000, np.random.default_rng(7))
    assert first != build_arrivals(pods, 10_000, np.random.default_rng(8))


def test_inflation_stops_on_the_per_gpu_share_so_multi_gpu_clones_overshoot_like_the_authors() -> None:
    # target 1.3 x 8000 = 10400: 4000 + 4000 (checked as +1000) = 8000, + 4000 (checked as 9000) = 12000, stop.
    arrivals = build_arrivals([make_pod("p", gpus=4)], 8000, np.random.default_rng(0), ratio=1.3)
    assert sum(p.gpu_request_milli for p in arrivals) == 12_000


def test_a_list_above_the_target_is_cut_by_random_pods() -> None:
    pods = [make_pod(f"p{i}", gpus=1) for i in range(5)]
    arrivals = build_arrivals(pods, 2000, np.random.default_rng(3), ratio=1.0)
    assert len(arrivals) == 2 and {p.name for p in arrivals} <= {p.name for p in pods}


def test_cpu_only_lists_are_not_inflated() -> None:
    pods = [make_pod("a"), make_pod("b")]
    assert len(build_arrivals(pods, 1000, np.random.default_rng(0))) == 2


def test_a_pod_that_fits_nowhere_fails_but_its_demand_counts_as_arrived() -> None:
    state = cluster(make_node(gpus=2, cpu=10_000, mem=10_000))
    arrivals = [make_pod("s1", gpus=1, milli=600), make_pod("s2", gpus=1, milli=600), make_pod("w", gpus=1)]
    shapes = shapes_for(arrivals, state)
    ctx = PolicyContext(np.random.default_rng(0), np.zeros(1, np.int64), shapes, state)
    run = run_protocol(POLICIES["bestfit"](ctx), state, arrivals, FragmentationMeter(shapes, state), points=(60,))
    assert run.failed == 1
    assert run.arrived_pct.tolist() == [30.0, 60.0, 110.0]
    assert run.alloc_pct.tolist() == [30.0, 60.0, 60.0]
    assert state.gpu_free[0, :2].tolist() == [400, 400]  # best fit could not share: 400 < 600
    at60 = run.at[60]
    assert at60 is not None
    assert (at60.alloc_pct, at60.unallocated_gpus, at60.idle_nodes) == (60.0, pytest.approx(0.8), 0.0)


def test_report_points_average_the_arrivals_that_round_to_them() -> None:
    arrived = np.array([50_000, 99_600, 100_400, 101_000])
    points = arrived_points(arrived, 100_000)
    assert points.tolist() == [50, 100, 100, 101]
    assert window(points, 100).tolist() == [1, 2]
    assert window(points, 102).tolist() == [3]  # none rounds to 102: within +-1
    assert window(points, 130).tolist() == [3]  # beyond the authors' rule: the closest arrivals
    alloc = np.array([40.0, 80.0, 90.0, 95.0])
    metrics = point_metrics(alloc, np.zeros(4), np.array([3.0, 2.0, 1.0, 0.0]), window(points, 100), total_gpus=10)
    assert metrics is not None
    assert (metrics.alloc_pct, metrics.unallocated_gpus, metrics.idle_nodes) == (85.0, pytest.approx(1.5), 1.5)
    assert point_metrics(alloc, alloc, alloc, window(points[:0], 130), 10) is None


def test_frag_ratio_is_the_fragmented_share_of_the_free_gpus() -> None:
    state = cluster(make_node(gpus=1))
    set_gpus(state, 0, [400])
    half = shapes_for([make_pod("big", gpus=1, milli=500), make_pod("small", gpus=1, milli=300)], state)
    assert FragmentationMeter(half, state).ratio_pct(state) == 50.0  # 400 free: fragment for one shape of two
    only_big = shapes_for([make_pod("big", gpus=1, milli=500)], state)
    assert FragmentationMeter(only_big, state).ratio_pct(state) == 100.0


def test_idle_nodes_count_gpu_nodes_without_any_pod() -> None:
    state = cluster(make_node("a"), make_node("b"), make_node("c", gpus=0))
    assert state.idle_nodes() == 2
    pod = make_pod("cpu-only")
    state.place(pod, Placement(1))
    assert state.idle_nodes() == 1
    state.unplace(pod, Placement(1))
    assert state.idle_nodes() == 2


def test_place_and_unplace_keep_every_array_consistent() -> None:
    state = cluster(make_node(gpus=4, cpu=8000, mem=100))
    pod = make_pod("p", cpu=3000, mem=40, gpus=2)
    state.place(pod, Placement(0, (1, 3)))
    assert state.gpu_free[0].tolist() == [1000, 0, 1000, 0, -1, -1, -1, -1]
    assert (state.cpu_free[0], state.mem_free[0], state.full_count[0], state.gpu_left[0]) == (5000, 60, 2, 2000)
    assert state.allocated_milli == 2000 and state.version[0] == 1
    state.unplace(pod, Placement(0, (1, 3)))
    assert state.gpu_free[0, :4].tolist() == [1000] * 4 and state.allocated_milli == 0 and state.version[0] == 2


@pytest.mark.parametrize(
    "placement",
    [Placement(0, (0,)), Placement(0, (5, 6)), Placement(0, (0, 0))],
    ids=["too-few-gpus", "absent-gpu", "same-gpu-twice"],
)
def test_impossible_placements_raise(placement: Placement) -> None:
    state = cluster(make_node(gpus=4))
    with pytest.raises(PlacementError):
        state.place(make_pod("p", gpus=2), placement)
