"""Every threshold the alerts and dashboards use, in one place.

The method's numbers are the core's (`gpupack.core.thresholds.Thresholds`, docs/method.md), which the report reads: a
node under 10 % for a week is idle, under 30 % underused, over 85 % hot; framebuffer at least half used while compute is
under 10 % is memory held idle; a MIG instance at 90 % of its memory is near OOM. So `gpupack report` and the alerts
never disagree about what a class means. The rest (how long before an alert fires, the webhook's latency budget,
certificate notice) are operational choices, each said once here and explained where it is defined.

`promtool test rules` files under `tests/monitoring/` pin these values at their boundaries, and a test builds the
rules with each one changed and checks that the tests then fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupack.core.thresholds import DEFAULT as _REPORT


@dataclass(frozen=True)
class AlertThresholds:
    """The numbers the generated rules are built from; `monitoring.rules.groups(AlertThresholds(...))`."""

    idle: float = _REPORT.idle
    """Percent: a node's mean GPU utilization over a week under this is idle (GPUNodeIdle)."""
    underused: float = _REPORT.underused
    """Percent: under this (and not idle) it is underused (GPUNodeUnderused)."""
    hot: float = _REPORT.hot
    """Percent: a node's 5-minute mean over this is hot (GPUNodeHot)."""
    hot_for: str = "10m"
    """The guide's: hot for ten minutes, capacity may be short."""
    week: str = "7d"
    """The window of the weekly classes."""
    week_history: str = "6d"
    """A node must have reported for this long within the week before it is called idle or underused: a node
    the autoscaler added yesterday is not idle "for a week"."""
    pending_for: str = "10m"
    """The guide's watch on pending GPU pods: pending longer than this means the cluster scaled down too far."""
    held_memory: float = _REPORT.held_memory
    """Fraction of a GPU's framebuffer used..."""
    held_compute: float = _REPORT.held_compute
    """...while its utilization is under this percent..."""
    held_for: str = "1h"
    """...for this long: memory held by a process that computes nothing (GPUMemoryHeldIdle)."""
    mig_near_oom: float = _REPORT.mig_near_oom
    """Fraction of a MIG instance's memory (used + free) at which it is near OOM (pitfall 1)."""
    mig_near_oom_for: str = "5m"
    """Long enough to skip one allocation spike, short enough to act before the OOM."""
    xid_window: str = "10m"
    """An XID error is reported for this long after the exporter shows a new one."""
    down_for: str = "5m"
    """No healthy webhook or extender target for this long (GpupackWebhookDown, GpupackExtenderDown)."""
    error_window: str = "10m"
    """Webhook error outcomes, policy reload failures and unrouted pods are reported for this long after one."""
    slow_seconds: float = 0.1
    """The webhook's p99 admission latency budget: every pod create waits for it."""
    slow_for: str = "10m"
    stale_for: str = "10m"
    """The extender scoring without live DCGM data for this long (GpupackExtenderMetricsStale)."""
    certificate_days: float = 14.0
    """Days of certificate validity left under which GpupackCertificateExpiringSoon fires."""


DEFAULT = AlertThresholds()
IDLE, UNDERUSED, HOT = DEFAULT.idle, DEFAULT.underused, DEFAULT.hot
"""The node classes' bounds, percent, for the dashboards."""
