"""gpupack's node order (`extender.packing`) on hand-made node states whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np

from gpupack.extender.fragmentation import typical_shapes
from gpupack.extender.packing import (
    ABSENT,
    NO_FIT,
    TIE_SPAN,
    Ask,
    cpu_per_gpu,
    fgd_score,
    fullest_fit,
    order_key,
    packed_gpu,
    packed_scores,
    partial_gpus,
    stays_open,
    tie_key,
)

MODELS = ("T4",)
# Typical pods: half-GPU replicas with 2 cores (6 of them), whole GPUs with 8 cores (4 of them).
SHAPES = typical_shapes([(2000, 500, 1, ())] * 6 + [(8000, 1000, 1, ())] * 4, MODELS)


def ints(*values: int) -> np.ndarray:  # type: ignore[type-arg]
    return np.array(values, dtype=np.int64)


def test_a_replica_goes_to_the_fullest_gpu_that_fits_lowest_index_first() -> None:
    gpus = np.array([[1000, 600, 300, 600], [200, 100, -1, -1], [1000, 1000, 1000, 1000]], dtype=np.int64)
    assert packed_gpu(Ask(0, 500, 1), gpus).tolist() == [1, -1, 0]
    assert packed_gpu(Ask(0, 500, 1), np.zeros((2, 0), np.int64)).tolist() == [-1, -1]  # nodes without GPUs
    rng = np.random.default_rng(3)
    for _ in range(200):  # the extender's one-node replay and the simulator's vector form agree
        row = rng.integers(-1, 1001, size=8)
        milli = int(rng.integers(1, 1000))
        assert fullest_fit(row.tolist(), milli) == int(packed_gpu(Ask(0, milli, 1), row[None, :])[0])


def test_fgd_score_is_50_when_fragmentation_does_not_move_and_lower_when_it_grows() -> None:
    assert fgd_score(ints(0), SHAPES).tolist() == [50]
    # 1000 milli-GPU more fragment (C = 10 shapes' count, so C * dF = 10,000): int(100 * sigmoid(-1)) = 26.
    assert fgd_score(ints(-10_000), SHAPES).tolist() == [26]


def test_a_replica_is_scored_on_the_gpu_the_device_plugin_gives_it() -> None:
    # Node 0: GPUs with 500 and 1000 free; the replica takes the 500 (fullest). Before, the whole-GPU pods (4 of
    # the 10) could not use that 500: C * F = 4 * 500. After, nothing is fragment: C * dF = 2000,
    # int(100 * sigmoid(0.2)) = 54. Node 1: one GPU with 700 free, which only the replicas can use (C * F = 4 *
    # 700); the replica leaves 200 that nothing can use (C * F = 10 * 200): C * dF = 800, score 51. Node 2:
    # nothing fits.
    gpus = np.array([[500, 1000], [700, -1], [400, -1]], dtype=np.int64)
    score, gpu = packed_scores(SHAPES, Ask(2000, 500, 1), ints(0, 0, 0), ints(32_000, 32_000, 32_000), gpus)
    assert gpu.tolist() == [0, 0, -1]
    assert score.tolist() == [54, 51, NO_FIT]


def test_tie_keys_by_pod_kind() -> None:
    gpu_left, cpu_free, pods = ints(0, 3000, 8000), ints(16_000, 16_000, 64_000), ints(4, 1, 0)
    count, partial = ints(8, 4, 8), ints(0, 2, 0)
    rho = cpu_per_gpu(SHAPES)  # (6 * 2000 + 4 * 8000) / (6 * 500 + 4 * 1000) = 44,000 / 7,000 milli-cores per milli-GPU
    assert abs(rho - 44_000 / 7_000) < 1e-9
    # CPU-only: the share of the GPUs free in eighths (0, 6 of 8, all 8), then whole GPUs free (0, 3, 8):
    # (8 - 0) * 17 + (16 - 0), (8 - 6) * 17 + (16 - 3), (8 - 8) * 17 + (16 - 8)
    cpu_only = tie_key(Ask(1000, 0, 0), gpu_left, cpu_free, pods, rho, count, partial)
    assert cpu_only.tolist() == [152, 47, 8]
    # A share, not a count: an 8-GPU node with 3 GPUs free (5/8 used) before a 2-GPU node with both free.
    two = tie_key(Ask(1000, 0, 0), ints(3000, 2000), ints(8000, 8000), ints(3, 0), rho, ints(8, 2), ints(0, 0))
    assert two.tolist() == [(8 - 3) * 17 + 13, 0 * 17 + 14]
    assert tie_key(Ask(2000, 500, 1), gpu_left, cpu_free, pods, rho, count, partial).tolist() == [1, 1, 0]  # in use
    # One GPU with 8 cores: node 1 keeps 2000 milli-GPU and 8000 milli-cores, which feed 8000 / rho = 1272.7 of
    # it: 727.3 stranded, 2 quarters of a GPU. Node 2 keeps 7000 with 56,000 cores (feeds 8909): nothing
    # stranded. Then a node in use.
    one = tie_key(Ask(8000, 1000, 1), gpu_left[1:], cpu_free[1:], pods[1:], rho, count[1:], partial[1:])
    assert one.tolist() == [((3 - 2) * 2 + 1) * 1000 + 999 - 727, (3 * 2 + 0) * 1000 + 999] == [3272, 6999]
    # Nodes a few milli-GPU of stranding apart (727.3 and 743.2: 2 quarters each) tie on quarters; the node in use
    # wins, though it strands 16 milli-GPU more; between two empty nodes the one that strands less.
    near = tie_key(Ask(8000, 1000, 1), ints(3000, 3000), ints(16_000, 15_900), ints(0, 1), rho, ints(4, 4), ints(0, 0))
    assert near.tolist() == [(1 * 2 + 0) * 1000 + 999 - 727, (1 * 2 + 1) * 1000 + 999 - 743]
    both_empty = tie_key(
        Ask(8000, 1000, 1), ints(3000, 3000), ints(16_000, 15_900), ints(0, 0), rho, ints(4, 4), ints(0, 0)
    )
    assert both_empty[0] > both_empty[1]
    # Multi-GPU: the fewest partly used GPUs.
    assert tie_key(Ask(16_000, 1000, 2), gpu_left, cpu_free, pods, rho, count, partial).tolist() == [16, 14, 16]


def test_partly_used_gpus_are_counted_per_node() -> None:
    gpus = np.array([[1000, 500, 0, ABSENT], [250, 250, 1000, 1000], [0, 0, ABSENT, ABSENT]], dtype=np.int64)
    assert partial_gpus(gpus).tolist() == [1, 2, 0]


def test_the_order_puts_fgd_first_then_the_tie_key_and_open_nodes_before_both() -> None:
    score, tie = ints(50, 50, 49, NO_FIT), ints(1, 0, TIE_SPAN - 1, 5)
    assert order_key(score, tie).tolist() == [50 * TIE_SPAN + 1, 50 * TIE_SPAN, 50 * TIE_SPAN - 1, NO_FIT]
    keyed = order_key(score, tie, np.array([False, False, True, True]))
    assert keyed[2] > keyed[0] > keyed[1] and keyed[3] == NO_FIT  # an open node beats a better FGD score


def test_empty_gpu_nodes_stay_open_only_for_pods_that_fill_them() -> None:
    requested = np.array([True, False, False, False])
    gpus = ints(8, 8, 4, 0)
    assert stays_open(Ask(0, 1000, 4), requested, gpus).tolist() == [True, False, True, True]
    assert stays_open(Ask(0, 500, 1), requested, gpus).tolist() == [True, False, False, True]
    assert stays_open(Ask(1000, 0, 0), requested, gpus).tolist() == [True, False, False, True]
