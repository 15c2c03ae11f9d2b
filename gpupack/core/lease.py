"""Is the gpupack scheduler alive? Its leader Lease as last read, and the verdict at a given time; pure.

kube-scheduler's leader election (`leaderElection` in manifests/extender/scheduler-config.yaml) keeps a
`coordination.k8s.io/v1` Lease: the leader renews `spec.renewTime` every `retryPeriod` (2 s by default), and the
Lease is held until `renewTime + leaseDurationSeconds` (15 s by default), after which a standby may take it. A
pod sent to a scheduler nobody runs stays Pending forever, so the webhook routes pods to it only while that
deadline, plus a grace, lies ahead. The reader is in `gpupack.core.kube`, the cache that polls it in
`gpupack.core.lease_cache`; between two reads the verdict is one addition and one comparison (`Observation.status`).

A Lease that cannot be used (a garbage `renewTime`, a negative duration, wrong JSON types) is never an error
here: it is a verdict, not live, with a reason that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from gpupack.core.validation import quoted

NotLiveReason = Literal["not-read-yet", "unreadable", "missing", "no-holder", "expired", "invalid"]
"""Why pods are not sent to the scheduler; stable, they label `gpupack_webhook_unrouted_total`."""

INT32_MAX = 2**31 - 1  # leaseDurationSeconds is an int32 in the API (coordination/v1 types.go)
MAX_LEASE_SECONDS = 600
"""The longest a Lease counts as held after a renewal, whatever its `leaseDurationSeconds` (kube-scheduler's is
15 s): a Lease written with 68 years would send pods to a dead scheduler for as long."""
_SHOWN = 40  # characters of a bad value quoted in a reason: it goes into every unrouted pod's warning


class LeaseUnreadable(Exception):
    """The Lease could not be read (HTTP status, connection error, not JSON); the message says which."""


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """Namespace and name of a Lease."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class SchedulerStatus:
    """Whether pods may be sent to the policy's scheduler now; if not, why, in words short enough for a warning."""

    live: bool
    reason: NotLiveReason | None = None
    detail: str = ""
    """For people, without the Lease's name (warnings are short; log lines add it): `lease expired 40s ago`."""


LIVE = SchedulerStatus(True, detail="lease held and renewed")
ASSUMED_LIVE = SchedulerStatus(True, detail="assumed live (no lease read)")
"""What offline callers plan with (`gpupack mutate` without `--lease`, the simulator): the scheduler is up."""
NOT_READ_YET = SchedulerStatus(False, "not-read-yet", "lease not read yet")
NO_API = SchedulerStatus(False, "unreadable", "no API access to read the lease")


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a Lease with a holder says: who, when it was last renewed (the scheduler's clock) and for how long."""

    holder: str
    renewed: float
    """`renewTime`, seconds since the epoch."""
    duration: int
    """`leaseDurationSeconds`."""


@dataclass(frozen=True, slots=True)
class Held:
    """A hold as the webhook judges it: who, and when it ends unless renewed, on the webhook's own clock."""

    holder: str
    expires_at: float
    """Seconds since the epoch, webhook clock: when a standby may take the Lease over (see `observe`)."""
    renewed: float = 0.0
    """The `renewTime` it was judged from, to tell a renewal from the same one read again."""


class InvalidLease(ValueError):
    """A Lease whose fields have the wrong type or value; the message names the field."""


def _show(value: Any) -> str:
    return quoted(value, _SHOWN)


def _timestamp(value: Any, where: str) -> float:
    """An RFC 3339 time with a zone (MicroTime, `2026-11-30T10:00:00.123456Z`) as seconds since the epoch."""
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidLease(f"{where} {_show(value)} is not a time")
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("no time zone")
        return parsed.timestamp()
    except (ValueError, OverflowError) as exc:
        raise InvalidLease(f"{where} {_show(value)} is not a time") from exc


def read_held(raw: Any) -> Renewal | None:
    """Who holds a Lease (its JSON), since when and for how long; None when nobody does (no spec, an empty
    holderIdentity).

    Raises InvalidLease naming the field when a holder is set but the times cannot be used.
    """
    if not isinstance(raw, dict):
        raise InvalidLease("the Lease is not a JSON object")
    spec = raw.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise InvalidLease("spec is not an object")
    holder = spec.get("holderIdentity")
    if holder is None or holder == "":
        return None
    if not isinstance(holder, str):
        raise InvalidLease(f"spec.holderIdentity {_show(holder)} is not a string")
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, bool) or not isinstance(duration, int) or not 0 < duration <= INT32_MAX:
        raise InvalidLease(f"spec.leaseDurationSeconds {_show(duration)} is not a positive number of seconds")
    duration = min(duration, MAX_LEASE_SECONDS)
    return Renewal(holder, _timestamp(spec.get("renewTime"), "spec.renewTime"), duration)


@dataclass(frozen=True, slots=True)
class Observation:
    """What the reads of one Lease said, reduced to what the verdict needs.

    `held` is the last hold seen; a failed read keeps it, so it ages out by itself and a one-off error changes
    nothing. `otherwise` is the verdict once `held` is absent or past its deadline: None means "expired", the
    other reasons are fixed when the read is made, so the verdict of a live Lease allocates nothing.
    """

    ref: LeaseRef
    held: Held | None
    otherwise: SchedulerStatus | None

    def status(self, now: float, grace: float) -> SchedulerStatus:
        """Live while `now` is at most `grace` past the hold's end (see `observe`); else why not."""
        held = self.held
        if held is not None and now <= held.expires_at + grace:
            return LIVE
        if self.otherwise is not None or held is None:
            return self.otherwise or NOT_READ_YET
        return SchedulerStatus(False, "expired", f"lease expired {now - held.expires_at:.0f}s ago")


def observe(ref: LeaseRef, raw: Any, now: float, previous: Observation | None = None) -> Observation:
    """The observation after a successful read at `now` (the webhook's clock): `raw` is the Lease's JSON, None when
    it does not exist (404); `previous` the observation before it.

    `renewTime` is written by the scheduler's clock and judged by the webhook's, which may differ. So, as
    client-go's leader election does, progress counts on the reader's own clock: a `renewTime` later than at the
    previous read (or a new holder) means the scheduler renewed in between, and holds until `now + leaseDurationSeconds`
    whatever the two clocks say. A `renewTime` never seen to change counts from itself, but no later than the
    read that first saw it: a Lease "renewed" ahead of the webhook's clock by a scheduler that then died expires
    `leaseDurationSeconds` after that read, not when the future date comes. Left over: a scheduler whose clock is
    behind by more than the grace looks dead until the read after its next renewal (one poll period).
    """
    if raw is None:
        # A deleted Lease is news, not noise: forget the last hold at once.
        return Observation(ref, None, SchedulerStatus(False, "missing", "lease not found"))
    try:
        renewal = read_held(raw)
    except InvalidLease as exc:
        return Observation(ref, None, SchedulerStatus(False, "invalid", f"lease invalid: {exc}"))
    if renewal is None:
        return Observation(ref, None, SchedulerStatus(False, "no-holder", "lease has no holder"))
    last = previous.held if previous is not None and previous.ref == ref else None
    if last is not None and (last.holder, last.renewed) == (renewal.holder, renewal.renewed):
        return Observation(ref, last, None)  # the same renewal read again: its deadline stands
    expires = min(renewal.renewed, now) + renewal.duration
    if last is not None and (renewal.holder != last.holder or renewal.renewed > last.renewed):
        expires = max(expires, now + renewal.duration)  # renewed (or taken over) since the previous read: alive
    return Observation(ref, Held(renewal.holder, expires, renewal.renewed), None)


def read_failed(ref: LeaseRef, previous: Observation | None, message: str) -> Observation:
    """The observation after a failed read: the last hold of the same Lease is kept until it expires, after which
    the verdict says the Lease is unreadable (not "expired": nobody knows whether it was renewed)."""
    held = previous.held if previous is not None and previous.ref == ref else None
    return Observation(ref, held, SchedulerStatus(False, "unreadable", f"lease unreadable: {message}"))
