"""Prometheus metrics shared by both services: the policy in force, reloads, and reads of the API.

Each service builds its metrics on a registry it is given (never the global one), so tests and two apps in
one process do not collide.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpupack.core.policy_store import LoadedPolicy, PolicyStore, load_policy_file


class PolicyMetrics:
    """`gpupack_policy_info{version,mode}`, `gpupack_policy_reload_failures_total` and
    `gpupack_policy_file_valid`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.info = Gauge(
            "gpupack_policy_info", "The policy version in force (value 1).", ["version", "mode"], registry=registry
        )
        self.reload_failures = Counter(
            "gpupack_policy_reload_failures_total",
            "Policy versions refused because they did not validate.",
            registry=registry,
        )
        self.file_valid = Gauge(
            "gpupack_policy_file_valid",
            "1 while the policy file holds the version in force or a valid new one; 0 while it holds a version "
            "that was refused (the service keeps the last good one, a restarted pod would not start).",
            registry=registry,
        )
        self.file_valid.set(1)  # a service starts only on a valid file

    def loaded(self, loaded: LoadedPolicy) -> None:
        """Point the info gauge at the new version."""
        self.info.clear()
        self.info.labels(loaded.version, loaded.policy.mode).set(1)

    def failed(self, _message: str) -> None:
        """Count a refused version; the file is invalid until a valid read."""
        self.reload_failures.inc()
        self.file_valid.set(0)

    def valid(self) -> None:
        """The file read validated."""
        self.file_valid.set(1)


def monitored_policy_store(path: Path | None, registry: CollectorRegistry) -> PolicyStore:
    """The policy a service serves from `path`, with its version and refused reloads exported on `registry`.

    Raises PolicyError or OSError when the file is invalid or unreadable: a service must not start on a policy
    nobody wrote.
    """
    metrics = PolicyMetrics(registry)
    return PolicyStore(
        path, load_policy_file(path), on_reload=metrics.loaded, on_failure=metrics.failed, on_valid=metrics.valid
    )


class ClusterReadMetrics:
    """Reads of PriorityClasses and nodes from the API."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.failures = Counter(
            "gpupack_cluster_read_failures_total", "Failed reads of PriorityClasses and nodes.", registry=registry
        )
        self.last_success = Gauge(
            "gpupack_cluster_read_last_success_timestamp_seconds", "When the API was last read.", registry=registry
        )


class LeaseMetrics:
    """Reads of the gpupack scheduler's leader Lease and what they said."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.live = Gauge(
            "gpupack_scheduler_lease_live",
            "1 while the gpupack scheduler's leader Lease is held and renewed (GPU pods are sent to it), else 0; "
            "as of the last read. No series while routing is off.",
            ["lease"],
            registry=registry,
        )
        self.failures = Counter(
            "gpupack_scheduler_lease_read_failures_total",
            "Failed reads of the gpupack scheduler's leader Lease (403, connection errors...; a 404 is a read).",
            registry=registry,
        )
        self._lease: str | None = None

    def observed(self, lease: str, live: bool) -> None:
        """Set the gauge of `lease` (namespace/name), dropping the series of a Lease the policy no longer names."""
        if lease != self._lease:
            self.live.clear()
            self._lease = lease
        self.live.labels(lease).set(1 if live else 0)

    def forget(self) -> None:
        """Routing was turned off: no series."""
        self.live.clear()
        self._lease = None
