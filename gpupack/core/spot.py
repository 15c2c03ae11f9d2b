"""What marks a node as spot capacity out of the box: the labels and taints Karpenter and the big clouds' node pools
put on spot nodes, so that a cluster needs no policy of its own to keep inference off spot (docs/platform/spot.md).

Sources, each read 2026-12:
- Karpenter (every cloud provider): the well-known label `karpenter.sh/capacity-type` (`spot`, `on-demand`,
  `reserved`) on every node it creates (kubernetes-sigs/karpenter `pkg/apis/v1/labels.go`, `CapacityTypeLabelKey`);
  no taint unless a NodePool adds one.
- Amazon EKS managed node groups: `eks.amazonaws.com/capacityType: SPOT` (or `ON_DEMAND`), no taint.
- GKE: Spot VMs carry `cloud.google.com/gke-spot: "true"`, preemptible VMs `cloud.google.com/gke-preemptible:
  "true"`; the taint `cloud.google.com/gke-spot=true:NoSchedule` where the node pool (or Autopilot) sets it.
- AKS: spot node pools carry `kubernetes.azure.com/scalesetpriority: spot` and are always tainted
  `kubernetes.azure.com/scalesetpriority=spot:NoSchedule`.

A toleration for a taint a node does not carry changes nothing, so pods allowed on spot tolerate every taint here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

KARPENTER_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
"""Karpenter's well-known label: `spot`, `on-demand` or `reserved`."""

WELL_KNOWN_LABELS: Final[tuple[tuple[str, str], ...]] = (
    (KARPENTER_CAPACITY_TYPE, "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
"""(key, value) of the labels that mark a spot node, whoever provisioned it."""

WELL_KNOWN_TAINTS: Final[tuple[tuple[str, str, str], ...]] = (
    ("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),
    ("cloud.google.com/gke-spot", "true", "NoSchedule"),
)
"""(key, value, effect) of the taints spot node pools carry."""


def spot_label(labels: Mapping[str, str], recognised: Iterable[tuple[str, str]]) -> str | None:
    """`key=value` of the first recognised spot label the node carries, None when it carries none."""
    for key, value in recognised:
        if labels.get(key) == value:
            return f"{key}={value}"
    return None


def by_key(recognised: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The recognised spot values of each label key, in order (an admin may give one key several values)."""
    grouped: dict[str, list[str]] = {}
    for key, value in recognised:
        values = grouped.setdefault(key, [])
        if value not in values:
            values.append(value)
    return grouped
