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
    """Extended resources (`nvidia.com/*`) that at least one node has in its allocatable (or had, within the
    webhook's memory: `remembered`); None when unknown, as when no node has ever advertised one."""
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


MAX_REMEMBERED = 1000
"""Resource names kept at most: a cluster has a few dozen GPU resource names."""


def remembered(
    seen: Mapping[str, float], advertised: frozenset[str], now: float, keep_seconds: float
) -> dict[str, float]:
    """When each GPU resource was last advertised by some node: `seen` with `advertised` seen `now`, and those not
    seen for `keep_seconds` forgotten.

    An autoscaler removes a GPU pool's last node once its pods are gone (Karpenter scales a NodePool to zero, and
    Cluster Autoscaler a node group with `min: 0`); the next pod must still be sized for what that pool offers, or
    it asks for a resource no node will have until a pod asks for it. What the nodes offered in the recent past
    stands for what their pools offer."""
    out = {r: t for r, t in seen.items() if now - t <= keep_seconds}
    out.update(dict.fromkeys(advertised, now))
    if len(out) > MAX_REMEMBERED:
        out = dict(sorted(out.items(), key=lambda item: -item[1])[:MAX_REMEMBERED])
    return out
