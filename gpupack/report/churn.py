"""Preemption churn from kube-scheduler's own metrics: per scheduler (scrape job), the preemption attempts, the
preemptions that went ahead and the pods they took over the window, in three `increase` queries
(`promql.scheduler_increase`).

kube-scheduler (v1.36 `pkg/scheduler/metrics/metrics.go`) counts attempts in `scheduler_preemption_attempts_total`
and observes each preemption's victim count in the `scheduler_preemption_victims` histogram. Neither names a pod:
which workloads lost them comes from the Events kube-scheduler writes on each victim (`gpupack.report.victims`).

kube-state-metrics' `kube_pod_status_reason{reason="PreemptionByScheduler"}` names pods, but only while a victim
is still terminating (its grace period, often shorter than a scrape interval), only in the versions that list that
reason, and not its workload (a join with `kube_pod_owner` over the window): a count from it undercounts, so the
report does not read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from gpupack.report import promql
from gpupack.report.series import Row
from gpupack.report.usage import Window


class InstantQuery(Protocol):
    """An instant query's series and values (`gpupack.report.prometheus.PrometheusUsage.instant`)."""

    def instant(self, query: str, at: float) -> list[Row]: ...


@dataclass(frozen=True, slots=True)
class SchedulerChurn:
    """One scheduler's preemptions over the window, each a whole count (None: the series is not there)."""

    job: str
    """The scrape job (`kube-scheduler`, `gpupack-scheduler`); empty when the series carry none."""
    attempts: int | None
    """Preemption attempts: pods that fit nowhere and were considered for preemption."""
    preemptions: int | None
    """Attempts that chose victims and went ahead."""
    victims: int | None
    """Pods those preemptions took."""


@dataclass(frozen=True, slots=True)
class Churn:
    """Every scheduler's churn over one window, by job name."""

    schedulers: tuple[SchedulerChurn, ...]

    @property
    def attempts(self) -> int | None:
        """All schedulers' attempts; None when none reports them."""
        return _total(s.attempts for s in self.schedulers)

    @property
    def preemptions(self) -> int | None:
        """All schedulers' preemptions that went ahead."""
        return _total(s.preemptions for s in self.schedulers)

    @property
    def victims(self) -> int | None:
        """All schedulers' victims."""
        return _total(s.victims for s in self.schedulers)


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _by_job(rows: list[Row]) -> dict[str, int]:
    """Each job's increase, rounded to a count (a value that is not a number is left out)."""
    return {labels.get(promql.SCHEDULER_LABEL, ""): round(value) for labels, value in rows if value is not None}


def read_churn(source: InstantQuery, window: Window) -> Churn | None:
    """The schedulers' churn over `window` (evaluated 1 ms before its end, as the usage queries), or None when
    Prometheus has neither metric for it (a managed control plane whose scheduler is not scraped): no churn is
    not zero churn. Raises what `source.instant` raises."""
    at, seconds = window.end - 0.001, window.seconds
    attempts = _by_job(source.instant(promql.scheduler_increase(promql.PREEMPTION_ATTEMPTS, seconds), at))
    victims = _by_job(source.instant(promql.scheduler_increase(f"{promql.PREEMPTION_VICTIMS}_sum", seconds), at))
    count = _by_job(source.instant(promql.scheduler_increase(f"{promql.PREEMPTION_VICTIMS}_count", seconds), at))
    jobs = sorted(set(attempts) | set(victims) | set(count))
    if not jobs:
        return None
    return Churn(tuple(SchedulerChurn(j, attempts.get(j), count.get(j), victims.get(j)) for j in jobs))
