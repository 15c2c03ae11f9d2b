"""What a run leaves free, and the part of it the pod sizes force, on cases worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gpupack.simulator.leftover import forced_remnant, leftover
from gpupack.simulator.metrics import FragmentationMeter
from gpupack.simulator.policies import POLICIES
from gpupack.simulator.policy import PolicyContext
from gpupack.simulator.protocol import run_protocol
from tests.test_simulator_kit import cluster, make_node, make_pod, set_gpus, shapes_for


def test_room_beside_large_shares_beyond_the_small_pods_is_forced() -> None:
    # rooms: 3 x 190 beside 810s and 350 beside the 650. Rooms <= 190 take only the 160s: 570 - 320 = 250.
    # Rooms <= 350 also take the 300: 920 - 620 = 300, the larger bound.
    assert forced_remnant({810: 3, 650: 1}, {160: 2, 300: 1, 470: 4}) == (300, 350)


def test_nothing_is_forced_when_the_small_pods_could_fill_every_room() -> None:
    assert forced_remnant({810: 2}, {190: 1, 100: 2}) == (0, 0)
    assert forced_remnant({}, {160: 5}) == (0, 0)


def test_a_share_of_half_a_gpu_or_less_is_not_a_large_share() -> None:
    with pytest.raises(ValueError, match="500"):
        forced_remnant({500: 1}, {})


def test_leftover_splits_whole_gpus_from_shares_left() -> None:
    state = cluster(make_node(gpus=3, cpu=10_000, mem=10_000))
    set_gpus(state, 0, [1000, 190, 0])
    left = leftover(state, {810: 1}, {})
    assert (left.whole_gpus, left.share_milli, left.forced_milli, left.forced_room) == (1, 190, 190, 190)


def test_a_run_reports_the_room_its_small_pods_could_not_fill() -> None:
    # One GPU: the 810 takes it, the 160 goes beside it, the 300 fits nowhere. 30 milli stay free, and all of it
    # is forced: the only pod small enough for the 190 room was the 160.
    state = cluster(make_node(gpus=1, cpu=10_000, mem=10_000))
    arrivals = [
        make_pod("big", gpus=1, milli=810),
        make_pod("small", gpus=1, milli=160),
        make_pod("mid", gpus=1, milli=300),
    ]
    shapes = shapes_for(arrivals, state)
    ctx = PolicyContext(np.random.default_rng(0), np.zeros(1, np.int64), shapes, state)
    run = run_protocol(POLICIES["bestfit"](ctx), state, arrivals, FragmentationMeter(shapes, state), points=(100,))
    assert run.failed == 1
    left = run.leftover
    assert (left.whole_gpus, left.share_milli, left.forced_milli, left.forced_room) == (0, 30, 30, 190)
