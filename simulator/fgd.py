"""Fragmentation Gradient Descent (Weng et al., ATC '23), faithful to the authors' `FGDScore` plugin.

A pod goes to the node whose fragmentation (see `simulator.fragmentation`) grows least. The node score is
`int64(100 * sigmoid(-dF / 1000))`, dF in milli-GPU: integer scores make many nodes tie (any node the pod
leaves unchanged scores exactly 50), and ties go to the run's random node order. A sharing pod tries every GPU
that fits and takes the one with the best score (lowest index on ties); whole-GPU pods take the lowest-indexed
free GPUs, which leaves the same fragmentation whichever free GPUs they take.

Speed: a node's score for a pod depends only on the node's state and the pod's shape, and one arrival changes
one node. Scores are cached per shape and node and recomputed only for nodes whose `version` moved since that
shape was last scored; identical node states (all the empty nodes of one type) are computed once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cluster import ClusterState, Placement
from simulator.devices import exclusive_gpus
from simulator.fragmentation import TypicalShapes, fragmentation
from simulator.policy import Bools, Ints, Policy, PolicyContext
from simulator.trace import MILLI, PodRecord

DEDUPE_ABOVE = 32
"""Stale-node batches larger than this are deduplicated by node state before scoring."""


@dataclass
class _ShapeScores:
    score: Ints
    gpu: Ints
    version: Ints


class FgdPolicy:
    """FGD node and GPU choice with per-shape score caches."""

    def __init__(self, shapes: TypicalShapes, tiebreak: Ints) -> None:
        self.shapes = shapes
        self.tiebreak = tiebreak
        self.scale = float(shapes.total) * 1000.0
        self._cache: dict[tuple[int, int, int], _ShapeScores] = {}

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """The feasible node with the best FGD score, then the GPU(s) inside it."""
        entry = self._scores(pod, state)
        key = np.where(feasible, entry.score * state.size + self.tiebreak, -1)
        node = int(np.argmax(key))
        if key[node] < 0:
            return None
        if pod.num_gpu == 0:
            return Placement(node)
        if pod.is_sharing:
            return Placement(node, (int(entry.gpu[node]),))
        return Placement(node, exclusive_gpus(state, node, pod.num_gpu))

    def node_scores(self, pod: PodRecord, state: ClusterState) -> tuple[Ints, Ints]:
        """(score, chosen GPU or -1) of every node for the pod, feasible or not (for tests and analysis)."""
        entry = self._scores(pod, state)
        return entry.score.copy(), entry.gpu.copy()

    def _scores(self, pod: PodRecord, state: ClusterState) -> _ShapeScores:
        key = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu)  # gpu_spec only filters nodes: it does not score
        entry = self._cache.get(key)
        if entry is None:
            size = state.size
            entry = _ShapeScores(np.zeros(size, np.int64), np.full(size, -1, np.int64), np.full(size, -1, np.int64))
            self._cache[key] = entry
        stale = np.flatnonzero(entry.version != state.version)
        if stale.size:
            model, cpu, gpus = state.model_id[stale], state.cpu_free[stale], state.gpu_free[stale]
            if stale.size > DEDUPE_ABOVE:
                rows = np.column_stack([model, cpu, gpus])
                unique, inverse = np.unique(rows, axis=0, return_inverse=True)
                score, gpu = self.score_states(pod, unique[:, 0], unique[:, 1], unique[:, 2:])
                inverse = inverse.reshape(-1)
                score, gpu = score[inverse], gpu[inverse]
            else:
                score, gpu = self.score_states(pod, model, cpu, gpus)
            entry.score[stale] = score
            entry.gpu[stale] = gpu
            entry.version[stale] = state.version[stale]
        return entry

    def score_states(self, pod: PodRecord, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints]:
        """FGD score (and sharing GPU, else -1) of placing the pod on each node state (rows of the arrays).

        The states before and after placement go through one `fragmentation()` call (it is overhead-bound).
        """
        count = model.size
        cpu_after = cpu - pod.cpu_milli
        if pod.is_sharing:
            rows, cols, decrease = self.sharing_decrease(pod, model, cpu, gpus)
            grid = np.full(gpus.shape, -1, np.int64)
            grid[rows, cols] = self._score(decrease)
            choice: Ints = np.argmax(grid, axis=1).astype(np.int64)
            best: Ints = grid[np.arange(count), choice]
            return best, np.where(best >= 0, choice, -1)
        after_gpus = gpus
        if pod.num_gpu:
            whole = gpus == MILLI
            taken = whole & (np.cumsum(whole, axis=1) <= pod.num_gpu)
            after_gpus = np.where(taken, 0, gpus)
        frag = fragmentation(
            self.shapes,
            np.concatenate([model, model]),
            np.concatenate([cpu, cpu_after]),
            np.concatenate([gpus, after_gpus]),
        )
        return self._score(frag[:count] - frag[count:]), np.full(count, -1, np.int64)

    def sharing_decrease(self, pod: PodRecord, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints, Ints]:
        """For a sharing pod: every (node row, GPU column) with room for it, and the fragmentation decrease of
        placing it there. The states before and after go through one `fragmentation()` call."""
        count = model.size
        rows, cols = np.nonzero(gpus >= pod.gpu_milli)
        candidates = gpus[rows]
        candidates[np.arange(rows.size), cols] -= pod.gpu_milli
        frag = fragmentation(
            self.shapes,
            np.concatenate([model, model[rows]]),
            np.concatenate([cpu, (cpu - pod.cpu_milli)[rows]]),
            np.concatenate([gpus, candidates]),
        )
        decrease: Ints = frag[:count][rows] - frag[count:]
        return rows, cols, decrease

    def _score(self, decrease: Ints) -> Ints:
        """int64(sigmoid(decrease / 1000) * 100) with decrease = C * (F_before - F_after) in exact integers."""
        x = decrease / self.scale
        result: Ints = ((1.0 / (1.0 + np.exp(-x))) * 100.0).astype(np.int64)
        return result


def fgd_policy(ctx: PolicyContext) -> Policy:
    """FGD with the run's typical shapes and tie order."""
    return FgdPolicy(ctx.shapes, ctx.tiebreak)
