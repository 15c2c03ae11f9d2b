"""The log line for pods left on the default scheduler: the first at once, then at most one per 10 s, each saying
how many pods since the previous line and why; nothing is lost, and nothing is timed (the clock is given)."""

from __future__ import annotations

import logging

import pytest

from gpupack.core.lease import SchedulerStatus
from gpupack.core.policy import parse_policy
from gpupack.webhook.unrouted import UnroutedLog

EXPIRED = SchedulerStatus(False, "expired", "lease expired 40s ago")
MISSING = SchedulerStatus(False, "missing", "lease not found")
SCHEDULER = parse_policy(b"").scheduler


def test_unrouted_pods_are_logged_at_most_once_per_interval_with_the_count_since_the_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    log = UnroutedLog(interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "gpupack.webhook.unrouted"):
        for at, status in [(100.0, EXPIRED), (101.0, EXPIRED), (105.0, MISSING), (109.9, EXPIRED), (110.0, EXPIRED)]:
            now[0] = at
            log.record(status, SCHEDULER, f"team-a/p-{at:g}")
    assert [r.getMessage() for r in caplog.records] == [
        "1 GPU pod left on default-scheduler, not packed, since the last line (expired 1): "
        "gpupack-scheduler has no live leader (lease gpupack-system/gpupack-scheduler: expired 40s ago)",
        "4 GPU pods left on default-scheduler, not packed, since the last line (expired 3, missing 1): "
        "gpupack-scheduler has no live leader (lease gpupack-system/gpupack-scheduler: expired 40s ago)",
    ]
    assert [r.__dict__["pod"] for r in caplog.records] == ["team-a/p-100", "team-a/p-110"]
