"""The extender's Prometheus metrics, on an injected registry.

Cache sizes and the age of the live data are read when `/metrics` is scraped (callback gauges), so the
request path only pays for the latency histogram and the filter-reason counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupack.extender.informer import InformerCounters
from gpupack.extender.live import LiveMetrics
from gpupack.extender.state import ClusterState

# kube-scheduler waits `httpTimeout` (5 s by default) per call, and every pod pays it: resolve milliseconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
VERBS = ("filter", "prioritize", "preempt")
REASONS = ("spot", "no-resource", "insufficient", "hot")
PREEMPT_OUTCOMES = ("kept", "spot", "no-resource", "insufficient", "hot", "unmeasured", "unknown-node", "costlier")
"""What became of a preemption candidate: kept, or dropped for one of these reasons."""


class ExtenderMetrics:
    """Latency per verb, filter reasons, bad requests, cache sizes, and the live data's age and reads."""

    def __init__(
        self,
        registry: CollectorRegistry,
        state: Callable[[], ClusterState],
        live: Callable[[], LiveMetrics],
        max_age: Callable[[], float],
        watch: Callable[[], InformerCounters | None] = lambda: None,
    ) -> None:
        latency = Histogram(
            "gpupack_extender_request_duration_seconds",
            "Time from request received to response ready, per verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.latency = {verb: latency.labels(verb) for verb in VERBS}
        reasons = Counter(
            "gpupack_extender_filtered_nodes_total",
            "Nodes removed by /filter, by reason: spot, no-resource, insufficient, hot.",
            ["reason"],
            registry=registry,
        )
        self.filtered = {reason: reasons.labels(reason) for reason in REASONS}
        bad = Counter(
            "gpupack_extender_bad_requests_total",
            "Requests answered with an error in band (not an ExtenderArgs, too large, too slow), per verb.",
            ["verb"],
            registry=registry,
        )
        self.bad_requests = {verb: bad.labels(verb) for verb in VERBS}
        self.preempt_candidates = Counter(
            "gpupack_extender_preempt_candidates_total",
            "Preemption candidate nodes kube-scheduler proposed, by what became of them: kept, or dropped and why.",
            ["outcome"],
            registry=registry,
        )
        for outcome in PREEMPT_OUTCOMES:
            self.preempt_candidates.labels(outcome)
        self.preempt_trimmed = Counter(
            "gpupack_extender_preempt_victims_trimmed_total",
            "Victims kube-scheduler proposed that the preemptor did not need, given back.",
            registry=registry,
        )
        self.metrics_read_failures = Counter(
            "gpupack_extender_metrics_read_failures_total",
            "Failed reads of live GPU metrics (Prometheus down, snapshot unreadable).",
            registry=registry,
        )
        Gauge("gpupack_extender_nodes_cached", "Nodes in the watch cache.", registry=registry).set_function(
            lambda: len(state().nodes)
        )
        Gauge("gpupack_extender_pods_cached", "Bound pods counted in the watch cache.", registry=registry).set_function(
            lambda: len(state().pods)
        )
        Gauge(
            "gpupack_extender_pods_assumed", "Pods ranked first, not yet seen bound.", registry=registry
        ).set_function(lambda: state().assumed_count())

        def age() -> float:
            newest = live().newest()
            return time.time() - newest if newest is not None else float("inf")

        Gauge(
            "gpupack_extender_metrics_age_seconds", "Age of the newest live GPU sample (+Inf: none).", registry=registry
        ).set_function(age)
        Gauge(
            "gpupack_extender_metrics_stale",
            "1 when no live GPU sample is fresher than extender.metrics.maxAgeSeconds: scores are neutral.",
            registry=registry,
        ).set_function(lambda: float(age() > max_age()))
        registry.register(_WatchCollector(watch))


class _WatchCollector(Collector):
    """`gpupack_extender_watch_*_total`: the informer's plain counters, read at scrape time."""

    def __init__(self, counters: Callable[[], InformerCounters | None]) -> None:
        self._counters = counters

    FAMILIES = (
        ("events", "Watch events applied to the cache."),
        ("skipped", "Malformed objects skipped."),
        ("lists", "Full lists of nodes or pods (first lists and re-lists)."),
        ("relists", "Lists again after 410 Gone."),
        ("errors", "Failed list or watch requests (followed by a back-off)."),
    )

    def collect(self) -> Iterable[Metric]:
        counters = self._counters()
        if counters is None:
            return
        for name, text in self.FAMILIES:
            yield CounterMetricFamily(f"gpupack_extender_watch_{name}", text, value=getattr(counters, name))

    def describe(self) -> Iterable[Metric]:
        """The families, without values (what the registry checks for duplicates, and the reference lists)."""
        for name, text in self.FAMILIES:
            yield CounterMetricFamily(f"gpupack_extender_watch_{name}", text)
