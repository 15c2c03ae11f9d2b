"""The log line for pods kept off the gpupack scheduler: one per burst, not one per pod.

While the scheduler is down every opted-in GPU pod is left on `default-scheduler`; at 1,000 pods/s a WARNING per
pod would flood the log and say nothing the first one did not. So the first pod is logged at once, then at most
one line per `interval` seconds, counting the pods since the previous line by reason. The counter
`gpupack_webhook_unrouted_total{reason}` counts every pod, and the Lease cache logs each change of verdict.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpupack.core.contract import DEFAULT_SCHEDULER
from gpupack.core.lease import SchedulerStatus
from gpupack.core.logs import RateLimit
from gpupack.core.policy import SchedulerPolicy

log = logging.getLogger(__name__)

LOG_INTERVAL = 10.0
"""Seconds between two lines: a 25 s outage (a dead leader is noticed within 25 s) gives a handful of lines."""


class UnroutedLog:
    """Counts unrouted pods by reason and writes a line when `interval` has passed since the last one."""

    def __init__(self, interval: float = LOG_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = RateLimit(interval, clock)
        self._pending: dict[str, int] = {}

    def record(self, status: SchedulerStatus, scheduler: SchedulerPolicy, pod: str) -> None:
        """One pod (`namespace/name`) was left on the default scheduler because of `status`."""
        reason = status.reason or "unknown"
        self._pending[reason] = self._pending.get(reason, 0) + 1
        if self._limit.allow() is None:
            return
        total = sum(self._pending.values())
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self._pending.items()))
        self._pending.clear()
        lease = scheduler.lease
        log.warning(
            "%d GPU pod%s left on %s, not packed, since the last line (%s): %s has no live leader (lease %s/%s: %s)",
            total,
            "" if total == 1 else "s",
            DEFAULT_SCHEDULER,
            reasons,
            scheduler.name,
            lease.namespace,
            lease.name,
            status.detail.removeprefix("lease "),
            extra={"pod": pod, "reason": reason},
        )
