"""What a placement costs: GPUs in use, GPU nodes left empty, and how busy the GPUs in use are.

The extender sees counts per resource, not which GPU each pod got; the device plugin packs time-sliced
replicas and MIG instances onto GPUs already in use, so GPUs in use are counted that way: whole GPUs as
requested, time-sliced replicas in groups of `replicas`, MIG instances by the profile that needs the most GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupack.core import contract
from gpupack.extender.inventory import NodeRecord


def gpus_in_use(node: NodeRecord, used: Mapping[str, int]) -> int:
    """Physical GPUs of `node` holding at least one pod, with the device plugin's packing."""
    whole = used.get(contract.RESOURCE_GPU, 0)
    shared = sum(
        math.ceil(n / max(node.replicas, 1))
        for r, n in used.items()
        if r != contract.RESOURCE_GPU and not r.startswith(contract.RESOURCE_MIG_PREFIX) and r in node.shares
    )
    mig = max(
        (
            math.ceil(n / (node.allocatable[r] / node.gpu_count))
            for r, n in used.items()
            if r.startswith(contract.RESOURCE_MIG_PREFIX) and node.allocatable.get(r) and node.gpu_count
        ),
        default=0,
    )
    return whole + shared + mig


@dataclass(frozen=True, slots=True)
class Cost:
    """The cluster after a placement."""

    gpus_in_use: int
    gpus_total: int
    empty_nodes: list[str]
    busy_gpus: float
    """GPUs' worth of work done (sum over pods of how busy they keep what they hold)."""

    @property
    def mean_utilization(self) -> float:
        """Mean utilization of the GPUs in use."""
        return self.busy_gpus / self.gpus_in_use if self.gpus_in_use else 0.0


def cost(nodes: Iterable[NodeRecord], used: Mapping[str, Mapping[str, int]], busy: float) -> Cost:
    """GPUs in use and empty GPU nodes for per-node usage `used`."""
    in_use, total, empty = 0, 0, []
    for node in nodes:
        n = gpus_in_use(node, used.get(node.name, {}))
        in_use += n
        total += node.gpu_count
        if n == 0 and node.gpu_count:
            empty.append(node.name)
    return Cost(in_use, total, empty, busy)
