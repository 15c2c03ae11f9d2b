"""The webhook's Prometheus metrics, on an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# The API server's own webhook histogram starts at 5 ms; ours resolves below it, where this webhook lives.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class WebhookMetrics:
    """Admissions by outcome and class, mutations by kind, latency, bad requests and handler errors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.admissions = Counter(
            "gpupack_webhook_admissions_total",
            "Admission reviews answered, by outcome (mutated, unchanged, skipped, denied, audited, error) and class.",
            ["outcome", "workload", "dry_run"],
            registry=registry,
        )
        self.mutations = Counter(
            "gpupack_webhook_mutations_total",
            "Changes made (or, in audit mode, that would be made) by kind: gpu, requests, spot, priority, autoscaler.",
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
