"""kube-scheduler's preemption metrics over time as Prometheus scraped them, in OpenMetrics text with timestamps
for `gpupack.testing.history.backfill`: the report's tests plant a history of them in a real Prometheus.

The families are kube-scheduler v1.36's (`pkg/scheduler/metrics/metrics.go`): `scheduler_preemption_attempts`, a
counter (`_total`), and `scheduler_preemption_victims`, a histogram of the victims each preemption chose with the
buckets `ExponentialBuckets(1, 2, 7)`. kube-scheduler gives them no labels; the scrape adds `job` and `instance`.
A process counts from zero: a restart (a new process with the same labels) resets the counters, as a real one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np
import numpy.typing as npt

from gpupack.testing.dcgm import label_set

ATTEMPTS = "scheduler_preemption_attempts"
VICTIMS = "scheduler_preemption_victims"
VICTIM_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
"""`metrics.ExponentialBuckets(1, 2, 7)`: "we think #victims>64 is pretty rare"."""
HELP = {
    ATTEMPTS: "Total preemption attempts in the cluster till now",
    VICTIMS: "Number of selected preemption victims",
}


@dataclass(frozen=True, slots=True)
class SchedulerProcess:
    """One kube-scheduler process, scraped as (`job`, `instance`) from `started` until `stopped`."""

    job: str
    instance: str
    started: float
    stopped: float | None = None
    attempts: Sequence[float] = ()
    """When it ran its preemption plugin (every pod that fit nowhere)..."""
    preemptions: Sequence[tuple[float, int]] = field(default_factory=tuple)
    """...and, of those, when one went ahead and with how many victims."""

    def alive(self, at: float) -> bool:
        return self.started <= at and (self.stopped is None or at < self.stopped)


def _count(times: Sequence[float], since: float, at: float) -> int:
    return sum(1 for t in times if since <= t <= at)


def _points(
    processes: Sequence[SchedulerProcess], times: npt.NDArray[np.float64]
) -> list[tuple[dict[str, str], list[tuple[float, SchedulerProcess]]]]:
    """Per label set, the sample times and the process scraped at each, in time order."""
    by_labels: dict[tuple[str, str], list[tuple[float, SchedulerProcess]]] = {}
    for at in times.tolist():
        for process in processes:
            if process.alive(at):
                by_labels.setdefault((process.job, process.instance), []).append((at, process))
    return [({"job": job, "instance": instance}, points) for (job, instance), points in sorted(by_labels.items())]


def _stamp(at: float) -> str:
    return str(int(at)) if float(at).is_integer() else repr(at)


def write_scheduler_openmetrics(
    out: TextIO, processes: Sequence[SchedulerProcess], times: npt.NDArray[np.float64], eof: bool = True
) -> int:
    """Both families of every process alive at each of `times` (sorted, epoch s); returns the samples written."""
    series = _points(processes, times)
    written = 0
    out.write(f"# HELP {ATTEMPTS} {HELP[ATTEMPTS]}\n# TYPE {ATTEMPTS} counter\n")
    for labels, points in series:
        for at, process in points:
            out.write(
                f"{ATTEMPTS}_total{label_set(labels)} {_count(process.attempts, process.started, at)} {_stamp(at)}\n"
            )
            written += 1
    out.write(f"# HELP {VICTIMS} {HELP[VICTIMS]}\n# TYPE {VICTIMS} histogram\n")
    for labels, points in series:
        for at, process in points:
            done = [n for t, n in process.preemptions if process.started <= t <= at]
            stamp = _stamp(at)
            for bound in (*VICTIM_BUCKETS, None):
                le = "+Inf" if bound is None else str(bound)
                inside = sum(1 for n in done if bound is None or n <= bound)
                out.write(f"{VICTIMS}_bucket{label_set({**labels, 'le': le})} {inside} {stamp}\n")
            out.write(f"{VICTIMS}_count{label_set(labels)} {len(done)} {stamp}\n")
            out.write(f"{VICTIMS}_sum{label_set(labels)} {sum(done)} {stamp}\n")
            written += len(VICTIM_BUCKETS) + 3
    if eof:
        out.write("# EOF\n")
    return written
