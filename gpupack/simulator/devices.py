"""Which GPU(s) inside the chosen node a pod takes, as the authors' Open-GPU-Share plugin allocates them.

Whole-GPU pods take the lowest-indexed fully free GPUs. A sharing pod takes, by default, the tightest GPU that
still fits ("best fit": the fullest one, like the device plugin's packed policy), lowest index on ties; the Random
baseline takes a uniformly random fitting GPU. FGD chooses its own GPU (see `gpupack.simulator.fgd`).
"""

from __future__ import annotations

import numpy as np

from gpupack.extender.packing import Ask, packed_gpu
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.trace import MILLI, PodRecord


def exclusive_gpus(state: ClusterState, node: int, count: int) -> tuple[int, ...]:
    """The `count` lowest-indexed fully free GPUs of the node (`AllocateExclusiveGpuId`)."""
    free = np.flatnonzero(state.gpu_free[node] == MILLI)[:count]
    return tuple(int(g) for g in free)


def best_fit_gpu(state: ClusterState, node: int, milli: int) -> int:
    """The GPU with the least free share that still fits `milli`, lowest index on ties."""
    return int(packed_gpu(Ask(0, milli, 1), state.gpu_free[node : node + 1])[0])


def random_fit_gpu(state: ClusterState, node: int, milli: int, rng: np.random.Generator) -> int:
    """A uniformly random GPU of the node that fits `milli`."""
    fits = np.flatnonzero(state.gpu_free[node] >= milli)
    return int(fits[rng.integers(fits.size)])


def packed_placement(state: ClusterState, node: int, pod: PodRecord) -> Placement:
    """The pod on `node` with best-fit GPU choice (what every baseline but Random and FGD does)."""
    if pod.num_gpu == 0:
        return Placement(node)
    if pod.is_sharing:
        return Placement(node, (best_fit_gpu(state, node, pod.gpu_milli),))
    return Placement(node, exclusive_gpus(state, node, pod.num_gpu))
