"""Builders for the simulator tests (no tests here): small hand-made nodes, pods and clusters."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupack.extender.fragmentation import TypicalShapes, typical_shapes
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.trace import MILLI, NodeRecord, PodRecord


def make_node(name: str = "n0", cpu: int = 64_000, mem: int = 256_000, gpus: int = 8, model: str = "T4") -> NodeRecord:
    return NodeRecord(name, cpu, mem, gpus, model if gpus else "")


def make_pod(
    name: str = "p", cpu: int = 1000, mem: int = 1000, gpus: int = 0, milli: int | None = None, spec: Sequence[str] = ()
) -> PodRecord:
    share = (MILLI if gpus else 0) if milli is None else milli
    return PodRecord(name, cpu, mem, gpus, share, tuple(spec))


def cluster(*nodes: NodeRecord) -> ClusterState:
    return ClusterState(list(nodes))


def set_gpus(state: ClusterState, node: int, free: Sequence[int]) -> None:
    """Occupy the node's GPUs so that they have `free` milli left, with one sharing pod per used GPU."""
    for g, left in enumerate(free):
        if left < MILLI:
            state.place(make_pod(f"fill-{node}-{g}", cpu=0, mem=0, gpus=1, milli=MILLI - left), Placement(node, (g,)))


def shapes_for(pods: Sequence[PodRecord], state: ClusterState, coverage: float = 1.0) -> TypicalShapes:
    return typical_shapes((p.shape for p in pods), state.models, coverage)


def tiebreak(*values: int) -> np.ndarray:  # type: ignore[type-arg]
    return np.array(values, dtype=np.int64)
