"""The published baselines and the two kube-scheduler classics, as integer node scores.

Formulas follow the authors' plugins (hkust-adsl/kubernetes-scheduler-simulator, `pkg/simulator/plugin`), with
floating-point operations in the same order so that truncation to int64 lands on the same integers:

- bestfit: `int((1 - sum_r 0.5 * (free_r - req_r) / maxSpec_r) * 100)` over r = CPU (maxSpec 128 cores) and GPU
  (maxSpec 8000 milli); the authors' min-max normalisation that follows cannot reorder nodes, so it is skipped.
- dotproduct (Tetris, "merge" dimensions, "max" norm): `int(100 * (1 - (free . req) / 2))` on the same vectors.
- random: a uniformly random feasible node; the sharing GPU is random too (the artifact's `-gpusel random`).
- spread / binpack: kube-scheduler's LeastAllocated / MostAllocated, integer 0..100 per resource, averaged over
  the pod's resources (CPU, memory, and GPU milli when it asks for GPUs), as the extender's `spread`/`binpack`.

Every policy but random takes the best-fit GPU inside the chosen node.
"""

from __future__ import annotations

import numpy as np

from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.devices import exclusive_gpus, random_fit_gpu
from gpupack.simulator.policy import Bools, Ints, Policy, PolicyContext, ScoredPolicy
from gpupack.simulator.trace import MILLI, PodRecord

MAX_SPEC_CPU = 128_000.0
"""The authors' CPU normaliser (milli-cores of their largest node)."""
MAX_SPEC_GPU = 8_000.0
"""The authors' GPU normaliser (milli-GPU of an 8-GPU node)."""
MAX_NODE_SCORE = 100


def bestfit_scores(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """BestFit: less CPU and GPU left after placing, higher score."""
    cpu_term = (state.cpu_free[nodes].astype(np.float64) - float(pod.cpu_milli)) / MAX_SPEC_CPU * 0.5
    gpu_left = state.gpu_left[nodes].astype(np.float64)
    gpu_term = (gpu_left - float(pod.gpu_request_milli)) / MAX_SPEC_GPU * 0.5
    score = (0.0 + cpu_term) + gpu_term
    result: Ints = ((1.0 - score) * float(MAX_NODE_SCORE)).astype(np.int64)
    return result


def dotproduct_scores(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """DotProduct: a smaller product of the node's free vector and the pod's request, higher score."""
    node_cpu = state.cpu_free[nodes].astype(np.float64) / MAX_SPEC_CPU
    node_gpu = state.gpu_left[nodes].astype(np.float64) / MAX_SPEC_GPU
    inner = (0.0 + node_cpu * (pod.cpu_milli / MAX_SPEC_CPU)) + node_gpu * (pod.gpu_request_milli / MAX_SPEC_GPU)
    result: Ints = (float(MAX_NODE_SCORE) * (1.0 - inner / 2.0)).astype(np.int64)
    return result


def _free_after(pod: PodRecord, state: ClusterState, nodes: Ints) -> list[tuple[Ints, Ints]]:
    """(free after placing, capacity) of each resource the pod asks for."""
    pairs = [
        (state.cpu_free[nodes] - pod.cpu_milli, state.cpu_cap[nodes]),
        (state.mem_free[nodes] - pod.memory_mib, state.mem_cap[nodes]),
    ]
    if pod.num_gpu:
        pairs.append((state.gpu_left[nodes] - pod.gpu_request_milli, state.gpu_count[nodes] * MILLI))
    return pairs


def spread_scores(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """LeastAllocated: the mean of `free_after * 100 // capacity` over the pod's resources."""
    pairs = _free_after(pod, state, nodes)
    total = sum((free * MAX_NODE_SCORE // np.maximum(cap, 1) for free, cap in pairs), np.zeros(nodes.size, np.int64))
    result: Ints = total // len(pairs)
    return result


def binpack_scores(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """MostAllocated: the mean of `(capacity - free_after) * 100 // capacity` over the pod's resources."""
    pairs = _free_after(pod, state, nodes)
    total = sum(
        ((cap - free) * MAX_NODE_SCORE // np.maximum(cap, 1) for free, cap in pairs), np.zeros(nodes.size, np.int64)
    )
    result: Ints = total // len(pairs)
    return result


class RandomPolicy:
    """A uniformly random feasible node, and a uniformly random fitting GPU for sharing pods."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """Draw a node, then a GPU."""
        candidates = np.flatnonzero(feasible)
        if candidates.size == 0:
            return None
        node = int(candidates[self.rng.integers(candidates.size)])
        if pod.num_gpu == 0:
            return Placement(node)
        if pod.is_sharing:
            return Placement(node, (random_fit_gpu(state, node, pod.gpu_milli, self.rng),))
        return Placement(node, exclusive_gpus(state, node, pod.num_gpu))


def random_policy(ctx: PolicyContext) -> Policy:
    """The Random baseline."""
    return RandomPolicy(ctx.rng)


def bestfit_policy(ctx: PolicyContext) -> Policy:
    """The BestFit baseline."""
    return ScoredPolicy(bestfit_scores, ctx.tiebreak)


def dotproduct_policy(ctx: PolicyContext) -> Policy:
    """The DotProduct (Tetris) baseline."""
    return ScoredPolicy(dotproduct_scores, ctx.tiebreak)


def spread_policy(ctx: PolicyContext) -> Policy:
    """kube-scheduler's default LeastAllocated."""
    return ScoredPolicy(spread_scores, ctx.tiebreak)


def binpack_policy(ctx: PolicyContext) -> Policy:
    """kube-scheduler's MostAllocated."""
    return ScoredPolicy(binpack_scores, ctx.tiebreak)
