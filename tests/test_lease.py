"""The verdict on the gpupack scheduler from its leader Lease: live until renewTime + leaseDurationSeconds + grace,
else a stable reason; bad Leases are verdicts, never exceptions; a failed read keeps the last hold, a 404 drops it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpupack.core.lease import (
    NOT_READ_YET,
    Held,
    LeaseRef,
    Observation,
    Renewal,
    observe,
    read_failed,
    read_held,
)
from gpupack.demo.cluster import leader_lease

REF = LeaseRef("gpupack-system", "gpupack-scheduler")
RENEWED = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC).timestamp()
GRACE = 10.0


def lease(**spec: Any) -> dict[str, Any]:
    """The shipped scheduler's Lease renewed at RENEWED (15 s), with `spec` fields replaced (None removes one)."""
    obj = leader_lease(REF.namespace, REF.name, RENEWED)
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key)
        else:
            obj["spec"][key] = value
    return obj


def test_a_renewed_lease_is_held_until_renew_time_plus_its_duration() -> None:
    assert read_held(lease()) == Renewal("gpupack-scheduler-6f7c9d-x2k9q_3b1f", RENEWED, 15)
    assert observe(REF, lease(), RENEWED).held == Held("gpupack-scheduler-6f7c9d-x2k9q_3b1f", RENEWED + 15, RENEWED)


@pytest.mark.parametrize(
    ("seconds_after_renewal", "live", "reason", "detail"),
    [
        (0.0, True, None, "lease held and renewed"),
        (15.0, True, None, "lease held and renewed"),  # the Lease's own deadline: a standby may take it now
        (25.0, True, None, "lease held and renewed"),  # exactly at duration + grace: still live
        (25.001, False, "expired", "lease expired 10s ago"),
        (55.0, False, "expired", "lease expired 40s ago"),
    ],
)
def test_a_held_lease_is_live_up_to_duration_plus_grace_and_expired_after(
    seconds_after_renewal: float, live: bool, reason: str | None, detail: str
) -> None:
    status = observe(REF, lease(), RENEWED).status(RENEWED + seconds_after_renewal, GRACE)
    assert (status.live, status.reason, status.detail) == (live, reason, detail)


@pytest.mark.parametrize(
    ("raw", "reason", "detail"),
    [
        (None, "missing", "lease not found"),
        (lease(holderIdentity=""), "no-holder", "lease has no holder"),
        (lease(holderIdentity=None), "no-holder", "lease has no holder"),
        ({"kind": "Lease", "metadata": {"name": "gpupack-scheduler"}}, "no-holder", "lease has no holder"),
        (lease(renewTime="garbage"), "invalid", "spec.renewTime 'garbage' is not a time"),
        (lease(renewTime="2026-11-30T10:00:00"), "invalid", "spec.renewTime '2026-11-30T10:00:00' is not a time"),
        (lease(renewTime="2026-13-45T99:00:00Z"), "invalid", "is not a time"),
        (lease(renewTime=1764496800), "invalid", "spec.renewTime 1764496800 is not a time"),
        (lease(renewTime="9" * 10_000), "invalid", "spec.renewTime '99999999999999999999999999999999999999…"),
        (lease(renewTime=None), "invalid", "spec.renewTime None is not a time"),
        (lease(leaseDurationSeconds=-15), "invalid", "spec.leaseDurationSeconds -15 is not a positive number"),
        (lease(leaseDurationSeconds=0), "invalid", "spec.leaseDurationSeconds 0 is not a positive number"),
        (lease(leaseDurationSeconds="15"), "invalid", "spec.leaseDurationSeconds '15' is not a positive number"),
        (lease(leaseDurationSeconds=15.5), "invalid", "spec.leaseDurationSeconds 15.5"),
        (lease(leaseDurationSeconds=True), "invalid", "spec.leaseDurationSeconds True"),
        (lease(leaseDurationSeconds=10**400), "invalid", "spec.leaseDurationSeconds"),
        (lease(holderIdentity=["a"]), "invalid", "spec.holderIdentity ['a'] is not a string"),
        ({"spec": "held"}, "invalid", "spec is not an object"),
        ([], "invalid", "the Lease is not a JSON object"),
    ],
)
def test_a_lease_that_cannot_be_used_is_not_live_with_a_reason_naming_the_field(
    raw: Any, reason: str, detail: str
) -> None:
    status = observe(REF, raw, RENEWED).status(RENEWED, GRACE)
    assert not status.live and status.reason == reason
    assert detail in status.detail


def test_a_failed_read_keeps_the_last_hold_until_it_expires_then_says_unreadable() -> None:
    good = observe(REF, lease(), RENEWED)
    after_error = read_failed(REF, good, "HTTP 403")
    assert after_error.status(RENEWED + 20, GRACE).live  # a transient error changes nothing
    late = after_error.status(RENEWED + 26, GRACE)
    assert (late.live, late.reason, late.detail) == (False, "unreadable", "lease unreadable: HTTP 403")


def test_a_deleted_lease_is_forgotten_at_once() -> None:
    seen = observe(REF, lease(), RENEWED)
    assert seen.status(RENEWED, GRACE).live
    status = observe(REF, None, RENEWED + 1, seen).status(RENEWED + 1, GRACE)
    assert (status.live, status.reason) == (False, "missing")


def test_a_failed_read_keeps_no_hold_of_another_lease() -> None:
    other = observe(LeaseRef("gpupack-system", "old-name"), lease(), RENEWED)
    status = read_failed(REF, other, "HTTP 503").status(RENEWED, GRACE)
    assert (status.live, status.reason) == (False, "unreadable")


def test_an_observation_without_hold_or_reason_is_not_read_yet() -> None:
    assert Observation(REF, None, None).status(RENEWED, GRACE) is NOT_READ_YET


def test_the_verdict_on_a_live_lease_allocates_nothing() -> None:
    """The hot path: a live verdict is one shared object, not a new one per admission."""
    seen = observe(REF, lease(), RENEWED)
    assert seen.status(RENEWED, GRACE) is seen.status(RENEWED + 1, GRACE)


def test_a_renewal_dated_ahead_of_the_webhooks_clock_counts_from_when_it_was_read() -> None:
    """A scheduler whose clock runs a day ahead, renewing once and dying: its Lease is not live for a day."""
    ahead = lease(renewTime="2026-12-01T10:00:00.000000Z")  # a day after RENEWED, the webhook's now
    first = observe(REF, ahead, RENEWED)
    again = observe(REF, ahead, RENEWED + 20, first)  # the same renewTime, read again: no progress
    assert again.status(RENEWED + 25, GRACE).live
    status = again.status(RENEWED + 26, GRACE)
    assert (status.live, status.reason) == (False, "expired")


def test_a_scheduler_whose_clock_runs_behind_is_live_once_it_is_seen_renewing() -> None:
    """Its renewTime is a minute old when written; the webhook sees it change between two reads: it is alive."""
    behind = [lease(renewTime=f"2026-11-30T09:59:{second:02d}.000000Z") for second in (0, 2)]
    first = observe(REF, behind[0], RENEWED)
    assert not first.status(RENEWED, GRACE).live  # one read cannot tell a slow clock from a dead scheduler
    second = observe(REF, behind[1], RENEWED + 5, first)
    assert second.status(RENEWED + 5, GRACE).live and second.status(RENEWED + 30, GRACE).live
    assert not second.status(RENEWED + 31, GRACE).live  # and expires 15 + 10 s after the read that saw it renew


def test_a_new_holder_is_progress_too() -> None:
    first = observe(REF, lease(), RENEWED)
    taken = observe(REF, lease(holderIdentity="gpupack-scheduler-other"), RENEWED + 30, first)
    assert taken.status(RENEWED + 50, GRACE).live


def test_a_lease_of_68_years_counts_as_ten_minutes() -> None:
    seen = observe(REF, lease(leaseDurationSeconds=2**31 - 1), RENEWED)
    assert seen.status(RENEWED + 600 + GRACE, GRACE).live and not seen.status(RENEWED + 601 + GRACE, GRACE).live
