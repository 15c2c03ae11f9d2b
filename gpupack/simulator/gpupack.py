"""gpupack's placement on the trace: the extender's own node order (`extender.packing`), over the whole cluster.

The score of each node comes from `extender.packing.packed_scores` (FGD's score with the pod taking the GPU the
device plugin's packed allocation gives it) and `tie_key` (the pod kind's tie breaker), combined by
`order_key`: the functions the extender's `/prioritize` runs for the same pod on the same node states. Remaining
ties go to the run's random node order, as they do in the reference simulator.

The trace models a fixed cluster (nodes are never removed), so `gpupack` runs as the extender does with
`keepEmptyNodes: false`; `gpupack-autoscaled` is the extender's default, which keeps empty GPU nodes for last.
"""

from __future__ import annotations

import numpy as np

from gpupack.extender.fragmentation import TypicalShapes
from gpupack.extender.packing import MILLI, cpu_per_gpu, order_key, packed_scores, partial_gpus, stays_open, tie_key
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.fgd import ShapeScoreCache, ask_of, place_on
from gpupack.simulator.policy import Bools, Ints, Policy, PolicyContext
from gpupack.simulator.trace import PodRecord


class GpupackPolicy:
    """The feasible node first in the extender's order, then the GPU(s) the device plugin would give."""

    def __init__(self, shapes: TypicalShapes, tiebreak: Ints, keep_empty_nodes: bool = False) -> None:
        self.tiebreak = tiebreak
        self.keep_empty_nodes = keep_empty_nodes
        self.rho = cpu_per_gpu(shapes)
        self.cache = ShapeScoreCache(shapes, packed_scores)

    def order(self, pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
        """The extender's order key of each node in `nodes` for the pod (higher goes first)."""
        score, _ = self.cache.scores(pod, state)
        return self._order(pod, state, nodes, score)

    def _order(self, pod: PodRecord, state: ClusterState, nodes: Ints, score: Ints) -> Ints:
        ask = ask_of(pod)
        count = state.gpu_count[nodes]
        tie = tie_key(
            ask,
            state.gpu_left[nodes],
            state.cpu_free[nodes],
            state.pod_count[nodes],
            self.rho,
            count,
            partial_gpus(state.gpu_free[nodes]),
        )
        open_first = None
        if self.keep_empty_nodes:
            open_first = stays_open(ask, state.gpu_left[nodes] < count * MILLI, count)
        return order_key(score[nodes], tie, open_first)

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """The best feasible node by `order`, ties to the run's node order, then the GPU(s) inside it."""
        candidates = np.flatnonzero(feasible)
        if candidates.size == 0:
            return None
        score, gpu = self.cache.scores(pod, state)
        key = self._order(pod, state, candidates, score)
        best = candidates[key == key.max()]
        node = int(best[np.argmax(self.tiebreak[best])])
        return place_on(pod, state, node, int(gpu[node]))


def gpupack_policy(ctx: PolicyContext) -> Policy:
    """gpupack for a fixed cluster (`keepEmptyNodes: false`), with the run's typical shapes and tie order."""
    return GpupackPolicy(ctx.shapes, ctx.tiebreak)


def gpupack_autoscaled_policy(ctx: PolicyContext) -> Policy:
    """gpupack's default policy (`keepEmptyNodes: true`): empty GPU nodes last, for an autoscaled cluster."""
    return GpupackPolicy(ctx.shapes, ctx.tiebreak, keep_empty_nodes=True)
