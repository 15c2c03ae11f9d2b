"""What the protocol reports where arrived demand reaches a point (100%, 130%), as the authors measure it.

The authors log the allocation after every arrival and report, for point p, the mean over the arrivals whose
arrived demand rounds to p% (`round(arrived / capacity * 100)`, half to even as pandas does), falling back to
the arrivals within p +- 1 when none rounds to p (and, beyond the authors' rule, to the closest arrivals when
none is within 1 point: on small clusters one pod moves arrived demand by several %). The same window gives
the other figures:

- alloc_pct: allocated milli-GPU / total milli-GPU, in %;
- unallocated_gpus: total GPUs x (1 - allocation ratio);
- frag_ratio: the authors' cluster "Frag ratio" (origin): sum of the nodes' FGD fragmentation over the free
  milli-GPU, in %. CPU-only typical shapes count a node's whole free GPU share as fragment, so this never drops
  to 0 while GPUs are free;
- idle_nodes: GPU nodes with no pod at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpupack.extender.fragmentation import TypicalShapes, node_fragmentation
from gpupack.simulator.cluster import ClusterState

Ints = NDArray[np.int64]
Floats = NDArray[np.float64]


@dataclass(frozen=True)
class PointMetrics:
    """The four reported figures at one arrived-demand point."""

    alloc_pct: float
    unallocated_gpus: float
    frag_ratio: float
    idle_nodes: float

    def as_dict(self) -> dict[str, float]:
        """The JSON shape of the issue: `{"alloc_pct": x, "unallocated_gpus": x, ...}`."""
        return {
            "alloc_pct": self.alloc_pct,
            "unallocated_gpus": self.unallocated_gpus,
            "frag_ratio": self.frag_ratio,
            "idle_nodes": self.idle_nodes,
        }


class FragmentationMeter:
    """The cluster's frag ratio, recomputing only the nodes that changed since the last reading."""

    def __init__(self, shapes: TypicalShapes, state: ClusterState) -> None:
        self.shapes = shapes
        self._frag = np.zeros(state.size, np.int64)
        self._version = np.full(state.size, -1, np.int64)

    def ratio_pct(self, state: ClusterState) -> float:
        """100 * sum of node fragmentation / free milli-GPU (0 when no GPU is free)."""
        stale = np.flatnonzero(self._version != state.version)
        if stale.size:
            self._frag[stale] = node_fragmentation(
                self.shapes, state.model_id[stale], state.cpu_free[stale], state.gpu_free[stale]
            )
            self._version[stale] = state.version[stale]
        free = int(state.gpu_left.sum())
        if free == 0:
            return 0.0
        return 100.0 * float(self._frag.sum()) / (self.shapes.total * free)


def arrived_points(arrived_milli: Ints, capacity_milli: int) -> Ints:
    """Each arrival's arrived demand in whole percent of capacity, rounded half to even."""
    result: Ints = np.rint(arrived_milli * 100.0 / capacity_milli).astype(np.int64)
    return result


def window(points: Ints, point: int) -> Ints:
    """Indices of the arrivals that report for `point`: rounding to it, else within +-1 of it (the authors'
    rule), else the closest ones (small clusters, where one pod moves arrived demand by several %)."""
    distance = np.abs(points - point)
    for chosen in (distance == 0, distance <= 1):
        if chosen.any():
            return np.flatnonzero(chosen)
    closest: Ints = np.flatnonzero(distance == distance.min()) if distance.size else np.flatnonzero(distance)
    return closest


def point_metrics(
    alloc_pct: Floats, frag_pct: Floats, idle: Floats, indices: Ints, total_gpus: int
) -> PointMetrics | None:
    """Means over the window's arrivals (None when the run never reached the point)."""
    if indices.size == 0:
        return None
    alloc = float(alloc_pct[indices].mean())
    return PointMetrics(
        alloc_pct=alloc,
        unallocated_gpus=total_gpus * (1.0 - alloc / 100.0),
        frag_ratio=float(frag_pct[indices].mean()),
        idle_nodes=float(idle[indices].mean()),
    )
