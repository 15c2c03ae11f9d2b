"""Fragmentation Gradient Descent (Weng et al., ATC '23), faithful to the authors' `FGDScore` plugin.

A pod goes to the node whose fragmentation (see `extender.fragmentation`) grows least. The node score is
`int64(100 * sigmoid(-dF / 1000))`, dF in milli-GPU: integer scores make many nodes tie (any node the pod
leaves unchanged scores exactly 50), and ties go to the run's random node order. A sharing pod tries every GPU
that fits and takes the one with the best score (lowest index on ties); whole-GPU pods take the lowest-indexed
free GPUs, which leaves the same fragmentation whichever free GPUs they take.

Speed: a node's score for a pod depends only on the node's state and the pod's shape, and one arrival changes
one node. Scores are cached per shape and node and recomputed only for nodes whose `version` moved since that
shape was last scored; identical node states (all the empty nodes of one type) are computed once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpupack.extender.fragmentation import TypicalShapes, per_distinct_state
from gpupack.extender.packing import Ask, fgd_score, sharing_decrease, whole_decrease
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.devices import exclusive_gpus
from gpupack.simulator.policy import Bools, Ints, Policy, PolicyContext
from gpupack.simulator.trace import PodRecord

StateScorer = Callable[[TypicalShapes, Ask, Ints, Ints, Ints], tuple[Ints, Ints]]
"""(shapes, ask, model [K], free CPU [K], free milli per GPU [K, G]) -> (score, GPU for a sharing pod or -1)."""


def ask_of(pod: PodRecord) -> Ask:
    """What the pod asks of a node, in the scoring functions' terms."""
    return Ask(pod.cpu_milli, pod.gpu_milli, pod.num_gpu)


def fgd_states(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints]:
    """FGD's score of each node state; a sharing pod takes the best-scoring GPU (lowest index on ties)."""
    count = model.size
    if not ask.sharing:
        return fgd_score(whole_decrease(shapes, ask, model, cpu, gpus), shapes), np.full(count, -1, np.int64)
    rows, cols, decrease = sharing_decrease(shapes, ask, model, cpu, gpus)
    grid = np.full(gpus.shape, -1, np.int64)
    grid[rows, cols] = fgd_score(decrease, shapes)
    choice: Ints = np.argmax(grid, axis=1).astype(np.int64)
    best: Ints = grid[np.arange(count), choice]
    return best, np.where(best >= 0, choice, -1)


@dataclass
class _ShapeScores:
    score: Ints
    gpu: Ints
    version: Ints


class ShapeScoreCache:
    """Scores of every node per pod shape, recomputed only for the nodes whose `version` moved since."""

    def __init__(self, shapes: TypicalShapes, scorer: StateScorer) -> None:
        self.shapes = shapes
        self.scorer = scorer
        self._cache: dict[tuple[int, int, int], _ShapeScores] = {}

    def scores(self, pod: PodRecord, state: ClusterState) -> tuple[Ints, Ints]:
        """(score, chosen GPU or -1) of every node for the pod's shape; the arrays are the cache's own."""
        key = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu)  # gpu_spec only filters nodes: it does not score
        entry = self._cache.get(key)
        if entry is None:
            size = state.size
            entry = _ShapeScores(np.zeros(size, np.int64), np.full(size, -1, np.int64), np.full(size, -1, np.int64))
            self._cache[key] = entry
        stale = np.flatnonzero(entry.version != state.version)
        if stale.size:
            ask, shapes, scorer = ask_of(pod), self.shapes, self.scorer
            score, gpu = per_distinct_state(
                lambda model, cpu, gpus: scorer(shapes, ask, model, cpu, gpus),
                state.model_id[stale],
                state.cpu_free[stale],
                state.gpu_free[stale],
            )
            entry.score[stale] = score
            entry.gpu[stale] = gpu
            entry.version[stale] = state.version[stale]
        return entry.score, entry.gpu


def place_on(pod: PodRecord, state: ClusterState, node: int, gpu: int) -> Placement:
    """The pod on `node`: on GPU `gpu` when it shares one, on the lowest-indexed free GPUs otherwise."""
    if pod.num_gpu == 0:
        return Placement(node)
    if pod.is_sharing:
        return Placement(node, (gpu,))
    return Placement(node, exclusive_gpus(state, node, pod.num_gpu))


class FgdPolicy:
    """FGD node and GPU choice with per-shape score caches."""

    def __init__(self, shapes: TypicalShapes, tiebreak: Ints) -> None:
        self.shapes = shapes
        self.tiebreak = tiebreak
        self.cache = ShapeScoreCache(shapes, fgd_states)

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """The feasible node with the best FGD score, then the GPU(s) inside it."""
        score, gpu = self.cache.scores(pod, state)
        key = np.where(feasible, score * state.size + self.tiebreak, -1)
        node = int(np.argmax(key))
        if key[node] < 0:
            return None
        return place_on(pod, state, node, int(gpu[node]))

    def node_scores(self, pod: PodRecord, state: ClusterState) -> tuple[Ints, Ints]:
        """(score, chosen GPU or -1) of every node for the pod, feasible or not (for tests and analysis)."""
        score, gpu = self.cache.scores(pod, state)
        return score.copy(), gpu.copy()


def fgd_policy(ctx: PolicyContext) -> Policy:
    """FGD with the run's typical shapes and tie order."""
    return FgdPolicy(ctx.shapes, ctx.tiebreak)
