"""What the node autoscalers read on pods and nodes to decide a node may not go: Cluster Autoscaler's
`safe-to-evict` and Karpenter's `do-not-disrupt`. The webhook writes them (`webhook.mutate`), the report reads them
(`gpupack.report.findings.blockers`); both ask this module (docs/platform/karpenter.md,
docs/platform/cluster-autoscaler.md).

Karpenter v1.15.0 (`pkg/utils/pod/scheduling.go`, `IsDoNotDisruptActive`) reads a pod's `karpenter.sh/do-not-disrupt`
as `"true"`, or as a Go duration counted from the pod's `status.startTime` (protected until it has run that long;
without a start time, protected); any other value is ignored, with an Event. On a Node (or NodeClaim) only `"true"`
counts (`pkg/controllers/state/statenode.go`). It never reads `safe-to-evict`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

from gpupack.core import contract

Autoscaler = Literal["cluster-autoscaler", "karpenter"]
AUTOSCALERS: Final[tuple[Autoscaler, ...]] = ("cluster-autoscaler", "karpenter")

PROTECTING: Final[Mapping[Autoscaler, tuple[str, str]]] = {
    "cluster-autoscaler": (contract.ANNOTATION_SAFE_TO_EVICT, "false"),
    "karpenter": (contract.ANNOTATION_DO_NOT_DISRUPT, "true"),
}
"""Per autoscaler, the pod annotation (and value) that keeps it from evicting the pod to remove its node."""

_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"^(?:{_PART.pattern})+$")


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string (`90s`, `1h30m`, `0.5h`), as `time.ParseDuration` reads a positive one;
    None when it is not one."""
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(number) * _UNIT[unit] for number, unit in _PART.findall(text))


def karpenter_protects(annotations: Mapping[str, str], started: float | None, now: float) -> bool:
    """Whether Karpenter's `do-not-disrupt` keeps this pod's node at `now`: `"true"`, or a positive duration the
    pod (started at `started`, seconds since the epoch; None: not started) has not yet run."""
    value = annotations.get(contract.ANNOTATION_DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    seconds = go_duration(value)
    if seconds is None or seconds <= 0:
        return False
    return started is None or now - started < seconds


def says_evictable(annotations: Mapping[str, str]) -> str | None:
    """The annotation by which a pod says an autoscaler may evict it, as `key=value`: a `safe-to-evict` other than
    `"false"`, or a `do-not-disrupt` Karpenter would not honour (not `"true"`, not a positive duration); None when
    it says nothing of the kind."""
    safe = annotations.get(contract.ANNOTATION_SAFE_TO_EVICT)
    if safe is not None and safe != "false":
        return f"{contract.ANNOTATION_SAFE_TO_EVICT}={safe}"
    keep = annotations.get(contract.ANNOTATION_DO_NOT_DISRUPT)
    if keep is not None and keep != "true" and not (go_duration(keep) or 0) > 0:
        return f"{contract.ANNOTATION_DO_NOT_DISRUPT}={keep}"
    return None
