"""The numbers that say what a node's utilization means: idle, underused, hot, memory held idle, near OOM.

The report's findings, the alerts and the extender's hot-node rule all read them here, so `gpupack report`, a
firing alert and a refused node never disagree about what "hot" is. The defaults are the method's
(docs/method.md): a node under 10 % for a week is idle, under 30 % in scope, over 85 % hot. The preemption-churn
levels are per day, so a day's window and a week's read alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NodeClass = Literal["idle", "underused", "ok", "hot", "unknown"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The numbers findings compare against; the guide's values are the defaults."""

    idle: float = 10.0
    """A node whose mean utilization over the window is under this (percent) is `idle`: handle these first."""
    underused: float = 30.0
    """Under this it is `underused`: in scope for sharing and scale-down."""
    hot: float = 85.0
    """Over this it is `hot`: the guide's alert level, capacity may be short."""
    held_memory: float = 0.5
    """A GPU holds its memory when at least this fraction of its framebuffer is used..."""
    held_compute: float = 10.0
    """...while its compute is under this (percent)..."""
    held_fraction: float = 0.5
    """...for at least this fraction of the window: `memory-held-idle`."""
    light_kernels_util: float = 50.0
    """`light-kernels`: GPU_UTIL at least this (percent)..."""
    light_kernels_engine: float = 25.0
    """...while engine activity is under this (percent): busy by one measure, mostly idle by the other."""
    mig_near_oom: float = 0.9
    """`mig-near-oom`: a MIG instance's framebuffer use at this fraction of its profile's memory or more."""
    oversized_util: float = 30.0
    """`oversized-workload`: whole-GPU pods under this utilization (percent)..."""
    oversized_memory: float = 0.5
    """...and under this fraction of the framebuffer: a MIG slice or a time-sliced replica would do."""
    preemption_medium: float = 5.0
    """`preemption-churn`: pods preempted per day of the window (kube-scheduler's victims) from which the churn is
    `medium`; fewer, yet at least one, is `low`..."""
    preemption_high: float = 50.0
    """...and from which it is `high`: whole runs and warm caches lost every hour."""

    def node_class(self, util: float | None) -> NodeClass:
        """The guide's class of a node by its mean utilization (percent)."""
        if util is None:
            return "unknown"
        if util < self.idle:
            return "idle"
        if util < self.underused:
            return "underused"
        if util > self.hot:
            return "hot"
        return "ok"


DEFAULT = Thresholds()
