"""The webhook's Prometheus metrics, on an injected registry."""

from __future__ import annotations

from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Histogram

from gpupack.core.lease import NotLiveReason

# The API server's own webhook histogram starts at 5 ms; ours resolves below it, where this webhook lives.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class WebhookMetrics:
    """Admissions by outcome and class, mutations by kind, pods kept off the gpupack scheduler, latency, bad
    requests and handler errors.

    The handler counts through `admitted()`, `mutated()` and `unrouted_pod()`, not `.labels()`: prometheus-client's
    `labels()` validates and stringifies its arguments and takes a lock on every call (about 3 µs each, three times
    per admission on the hot path), while the label sets are few and fixed, so each child is looked up once and
    kept in a dict keyed by its label values.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.admissions = Counter(
            "gpupack_webhook_admissions_total",
            "Admission reviews answered, by outcome (mutated, unchanged, skipped, denied, audited, error) and class.",
            ["outcome", "workload", "dry_run"],
            registry=registry,
        )
        self.mutations = Counter(
            "gpupack_webhook_mutations_total",
            "Pods changed (or, in audit mode, that would be changed), counted once per kind: gpu, requests, spot, "
            "priority, autoscaler, scheduler.",
            ["kind", "mode"],
            registry=registry,
        )
        self.latency = Histogram(
            "gpupack_webhook_admission_duration_seconds",
            "Time from request received to response ready.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.bad_requests = Counter(
            "gpupack_webhook_bad_requests_total",
            "Requests refused before any decision: not an AdmissionReview, too large, too slow.",
            ["reason"],
            registry=registry,
        )
        self.unrouted = Counter(
            "gpupack_webhook_unrouted_total",
            "Opted-in GPU pods left on (or moved to) default-scheduler, not packed, because the policy's scheduler "
            "has no live leader, by reason: not-read-yet, unreadable, missing, no-holder, expired, invalid. "
            "Pods created in enforce mode only (no dry runs, no audit).",
            ["reason"],
            registry=registry,
        )
        self._admitted: dict[tuple[str, str, bool], Counter] = {}
        self._mutated: dict[tuple[str, str], Counter] = {}
        self._unrouted: dict[str, Counter] = {}
        # The series the alerts watch exist at 0 from the start: `increase()` sees the first error or unrouted pod
        # (a child created by its first increment starts at 1, and its rise is never seen).
        for dry_run in (False, True):
            self._admitted[("error", "none", dry_run)] = self.admissions.labels("error", "none", str(dry_run).lower())
        for reason in get_args(NotLiveReason):
            self._unrouted[reason] = self.unrouted.labels(reason)

    def admitted(self, outcome: str, workload: str, dry_run: bool) -> None:
        """Count one admission answered (`dry_run` becomes the label `true` / `false`)."""
        key = (outcome, workload, dry_run)
        child = self._admitted.get(key)
        if child is None:
            child = self._admitted[key] = self.admissions.labels(outcome, workload, str(dry_run).lower())
        child.inc()

    def mutated(self, kind: str, mode: str) -> None:
        """Count one change made (mode `enforce`) or that would have been made (mode `audit`)."""
        key = (kind, mode)
        child = self._mutated.get(key)
        if child is None:
            child = self._mutated[key] = self.mutations.labels(kind, mode)
        child.inc()

    def unrouted_pod(self, reason: str) -> None:
        """Count one pod kept off the policy's scheduler, by why (a reason of `gpupack.core.lease.NotLiveReason`)."""
        child = self._unrouted.get(reason)
        if child is None:
            child = self._unrouted[reason] = self.unrouted.labels(reason)
        child.inc()
