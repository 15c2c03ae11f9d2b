"""What the webhook knows about the cluster beyond the pod: PriorityClasses and the GPU resources nodes offer.

`None` in a field means "not known" (the API was never read): callers fall back to the policy. The reader
that fills it lives in `gpupack.core.kube`; this module stays free of the kubernetes client so pure code can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    """A PriorityClass as the API server stores it."""

    value: int
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """A snapshot read from the API; the default instance knows nothing."""

    priority_classes: Mapping[str, PriorityClassInfo] | None = None
    advertised_resources: frozenset[str] | None = None
    """Extended resources (`nvidia.com/*`) that at least one node has in its allocatable."""
    read_at: float | None = field(default=None, compare=False)


UNKNOWN = ClusterFacts()


def facts(
    priority_classes: Mapping[str, PriorityClassInfo] | None,
    advertised: frozenset[str] | None,
    read_at: float | None = None,
) -> ClusterFacts:
    """Build an immutable snapshot."""
    classes = MappingProxyType(dict(priority_classes)) if priority_classes is not None else None
    return ClusterFacts(classes, advertised, read_at)
