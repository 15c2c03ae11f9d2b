"""The cluster's free resources as numpy arrays, so policies score every node in a few vector operations.

Per node: free CPU (milli), free memory (MiB), GPU model id, and a `[nodes, MAX_GPUS]` matrix of free milli-GPU
per GPU where absent GPUs hold -1 (they never fit, and `np.maximum(free, 0)` sums them away). `version[n]`
increases whenever node n changes, so caches keyed on node state (FGD's fragmentation) re-check only what moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpupack.extender.packing import ABSENT
from gpupack.simulator.trace import MILLI, NodeRecord, PodRecord

MAX_GPUS = 8
"""GPUs per node in the trace (8 at most); the width of the per-GPU matrix."""


Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]


class PlacementError(ValueError):
    """A placement asks for more than the node or the chosen GPUs have left (a policy bug)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: a node index and the GPU indices inside it (empty for CPU-only pods)."""

    node: int
    gpus: tuple[int, ...] = ()


class ClusterState:
    """Mutable free-resource arrays of a fixed set of nodes; `place`/`unplace` keep every array consistent."""

    def __init__(self, nodes: Sequence[NodeRecord]) -> None:
        if any(n.gpus > MAX_GPUS for n in nodes):
            raise ValueError(f"a node has more than {MAX_GPUS} GPUs")
        self.names: tuple[str, ...] = tuple(n.name for n in nodes)
        self.models: tuple[str, ...] = tuple(sorted({n.model for n in nodes}))
        index = {m: i for i, m in enumerate(self.models)}
        self.model_id: Ints = np.array([index[n.model] for n in nodes], dtype=np.int64)
        self.cpu_cap: Ints = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem_cap: Ints = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_count: Ints = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.cpu_free: Ints = self.cpu_cap.copy()
        self.mem_free: Ints = self.mem_cap.copy()
        slots = np.arange(MAX_GPUS)[None, :] < self.gpu_count[:, None]
        self.gpu_free: Ints = np.where(slots, MILLI, ABSENT).astype(np.int64)
        self.full_count: Ints = self.gpu_count.copy()
        self.max_free: Ints = np.where(self.gpu_count > 0, MILLI, 0).astype(np.int64)
        self.gpu_left: Ints = self.gpu_count * MILLI
        """Free milli-GPU of each node (kept in step with `gpu_free`)."""
        self.pod_count: Ints = np.zeros(len(nodes), dtype=np.int64)
        self.version: Ints = np.zeros(len(nodes), dtype=np.int64)
        self.total_gpus = int(self.gpu_count.sum())
        self.allocated_milli = 0
        self._spec_masks: dict[tuple[str, ...], Bools] = {}

    @property
    def size(self) -> int:
        """Number of nodes."""
        return len(self.names)

    def idle_nodes(self) -> int:
        """GPU nodes with no pod at all (what an autoscaler could remove)."""
        return int(np.count_nonzero((self.pod_count == 0) & (self.gpu_count > 0)))

    def spec_mask(self, spec: tuple[str, ...]) -> Bools:
        """Nodes whose GPU model a `gpu_spec` accepts (all GPU nodes when the spec is empty)."""
        mask = self._spec_masks.get(spec)
        if mask is None:
            accepted = [i for i, m in enumerate(self.models) if m and (not spec or m in spec)]
            mask = np.isin(self.model_id, accepted)
            self._spec_masks[spec] = mask
        return mask

    def feasible(self, pod: PodRecord) -> Bools:
        """Nodes the pod fits on, by the published fit rules.

        CPU and memory must fit; a GPU pod needs a model its `gpu_spec` lists; a sharing pod needs one GPU with at
        least `gpu_milli` free; any other GPU pod needs `num_gpu` fully free GPUs.
        """
        mask: Bools = (self.cpu_free >= pod.cpu_milli) & (self.mem_free >= pod.memory_mib)
        if pod.num_gpu == 0:
            return mask
        mask &= self.spec_mask(pod.gpu_spec)
        if pod.gpu_milli < MILLI:
            mask &= self.max_free >= pod.gpu_milli
        else:
            mask &= self.full_count >= pod.num_gpu
        return mask

    def place(self, pod: PodRecord, placement: Placement) -> None:
        """Take the pod's CPU, memory and GPU shares from the node and GPUs of `placement`."""
        self._apply(pod, placement, -1)

    def unplace(self, pod: PodRecord, placement: Placement) -> None:
        """Give back what `place(pod, placement)` took."""
        self._apply(pod, placement, +1)

    def _apply(self, pod: PodRecord, placement: Placement, sign: int) -> None:
        n, gpus = placement.node, placement.gpus
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise PlacementError(f"{pod.name}: {len(gpus)} GPU(s) chosen for a {pod.num_gpu}-GPU pod")
        row = self.gpu_free[n]
        cpu = int(self.cpu_free[n]) + sign * pod.cpu_milli
        mem = int(self.mem_free[n]) + sign * pod.memory_mib
        if not (0 <= cpu <= self.cpu_cap[n] and 0 <= mem <= self.mem_cap[n]):
            raise PlacementError(f"{pod.name}: CPU or memory out of range on node {self.names[n]}")
        for g in gpus:
            after = int(row[g]) + sign * pod.gpu_milli
            if row[g] == ABSENT or not 0 <= after <= MILLI:
                raise PlacementError(f"{pod.name}: GPU {g} of node {self.names[n]} cannot take {pod.gpu_milli} milli")
            row[g] = after
        self.cpu_free[n], self.mem_free[n] = cpu, mem
        if gpus:
            self.full_count[n] = int(np.count_nonzero(row == MILLI))
            self.max_free[n] = max(int(row.max()), 0)
            self.gpu_left[n] += sign * pod.gpu_request_milli
        self.pod_count[n] -= sign
        self.version[n] += 1
        self.allocated_milli -= sign * pod.gpu_request_milli
