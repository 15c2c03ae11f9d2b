"""The gpupack scheduler's Lease, read in the background; admission only asks the last observation for a verdict.

Reads happen every `scheduler.pollSeconds` (one GET, in a thread), never on the request path, and never when
`scheduler.name` is null. What a failed read does: the last hold seen is kept, so a transient error changes
nothing and a lasting one makes the scheduler count as not live once that hold expires (reason `unreadable`);
a 404 forgets the hold at once (`missing`). Each failed read is logged at WARNING (one line, no traceback), each
change of verdict once (WARNING when the scheduler stops being live, INFO when it is live again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpupack.core.lease import (
    NO_API,
    NOT_READ_YET,
    LeaseRef,
    LeaseUnreadable,
    Observation,
    SchedulerStatus,
    observe,
    read_failed,
)
from gpupack.core.policy import SchedulerPolicy
from gpupack.core.telemetry import LeaseMetrics

log = logging.getLogger(__name__)


class LeaseReader(Protocol):
    """GETs one Lease; blocking (run in a thread). Returns its JSON, or None when it does not exist (404);
    raises LeaseUnreadable (or anything else) when it cannot be read."""

    def read(self, namespace: str, name: str) -> Any: ...


class LeaseCache:
    """The last observation of the policy's Lease; `status()` is what admission calls."""

    def __init__(
        self,
        reader: LeaseReader | None,
        metrics: LeaseMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.reader = reader
        self.observation: Observation | None = None
        """None until the first read of the Lease the policy names."""
        self._metrics = metrics
        self._clock = clock
        self._said: tuple[LeaseRef, bool, str | None] | None = None
        """The verdict last logged, so each change is logged once."""

    def status(self, scheduler: SchedulerPolicy, now: float) -> SchedulerStatus:
        """The verdict on the scheduler at `now` (seconds since the epoch): a few attribute reads and a comparison.

        Without API access the scheduler cannot be known to be alive: not live (`unreadable`). An observation of
        another Lease (the policy just changed `scheduler.lease`) counts as none.
        """
        seen = self.observation
        lease = scheduler.lease
        if seen is None or seen.ref.name != lease.name or seen.ref.namespace != lease.namespace:
            return NO_API if self.reader is None else NOT_READ_YET
        return seen.status(now, scheduler.grace_seconds)

    async def refresh(self, scheduler: SchedulerPolicy) -> SchedulerStatus | None:
        """Read the Lease once and return the verdict right after; None when there is nothing to read (routing is
        off, or no API access)."""
        if self.reader is None:
            return None
        if scheduler.name is None:  # routing off: forget, so turning it on again starts from "not read yet"
            if self._metrics is not None:
                self._metrics.forget()
            self.observation, self._said = None, None
            return None
        ref = LeaseRef(scheduler.lease.namespace, scheduler.lease.name)
        try:
            raw = await asyncio.to_thread(self.reader.read, ref.namespace, ref.name)
        except Exception as exc:  # LeaseUnreadable from gpupack.core.kube; anything else from another reader
            message = str(exc) if isinstance(exc, LeaseUnreadable) else f"{type(exc).__name__}: {exc}"
            self.observation = read_failed(ref, self.observation, message)
            kept = self.observation.held is not None
            keeping = "; keeping the last renewal seen until it expires" if kept else ""
            log.warning("cannot read lease %s: %s%s", ref, message, keeping)
            if self._metrics is not None:
                self._metrics.failures.inc()
        else:
            self.observation = observe(ref, raw, self._clock(), self.observation)
        status = self.status(scheduler, self._clock())
        self._report(scheduler, ref, status)
        return status

    def _report(self, scheduler: SchedulerPolicy, ref: LeaseRef, status: SchedulerStatus) -> None:
        if self._metrics is not None:
            self._metrics.observed(str(ref), status.live)
        said = (ref, status.live, status.reason)
        if said == self._said:
            return
        self._said = said
        seen = self.observation
        if status.live:
            holder = seen.held.holder if seen is not None and seen.held is not None else "?"
            log.info("%s is live: lease %s held by %s; GPU pods are sent to it", scheduler.name, ref, holder)
        else:
            log.warning(
                "%s has no live leader (lease %s: %s): GPU pods stay on default-scheduler, not packed",
                scheduler.name,
                ref,
                status.detail.removeprefix("lease "),
                extra={"reason": status.reason},
            )

    async def run(self, scheduler: Callable[[], SchedulerPolicy]) -> None:
        """Read every `scheduler().poll_seconds` until cancelled, starting one period from now (the caller reads
        once before serving). The policy is asked again each time, so a reload that names another Lease, or turns
        routing on or off, takes effect at the next read."""
        if self.reader is None:
            return
        while True:
            await asyncio.sleep(scheduler().poll_seconds)
            await self.refresh(scheduler())
