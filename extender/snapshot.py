"""The input of every placement decision: one node, what is used on it, and its fresh GPU utilizations.

Filters and scores are pure functions of (pod demand, node snapshot, policy), so the extender, the tests
and the simulator all drive the same code with snapshots they build their own way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupack.extender.inventory import NodeRecord


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A node at decision time."""

    node: NodeRecord
    used: Mapping[str, int]
    """Requested by bound pods and assumed placements, per resource (same units as `allocatable`)."""
    utils: tuple[float, ...] = ()
    """Utilization 0-1 of each GPU with fresh data; empty when none is fresh (scores then stay neutral)."""
    gpu_free: tuple[int, ...] = ()
    """Free milli-GPU of each physical GPU for whole and time-sliced pods (`extender.typical.gpu_layout`)."""
    pods: int = 0
    """Pods on the node, bound and assumed."""
    gpu_used: float = field(init=False)
    """Physical GPUs' worth of GPU resources requested on the node (computed once: every score reads it)."""

    def __post_init__(self) -> None:
        shares = self.node.shares
        used = sum(n * shares[r] for r, n in self.used.items() if r in shares)
        object.__setattr__(self, "gpu_used", used)

    def free(self, resource: str) -> int:
        """Units of `resource` not yet requested (never below zero)."""
        return max(self.node.allocatable.get(resource, 0) - self.used.get(resource, 0), 0)

    @property
    def empty(self) -> bool:
        """No GPU of the node is requested: Cluster Autoscaler may remove it if it stays so."""
        return self.gpu_used <= 0
