"""kube-scheduler's preemption churn from a real Prometheus holding a planted history, worked out by hand.

The history is kube-scheduler's two families as its scrapes store them (`gpupack.testing.scheduler`): the
default scheduler's leader restarting mid-week (its counters reset), a standby that never preempts, and
gpupack's scheduler; preemptions before and after the week, which must not count. Beside it a DCGM exporter's
history over two weeks, so that `gpupack report` runs end to end on the week (scheduler metrics and a cluster
file's Events) and on the week before (DCGM only: no scheduler metrics, no finding, no error).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupack.cli import main
from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE
from gpupack.report.churn import Churn, SchedulerChurn, read_churn
from gpupack.report.prometheus import PrometheusUsage
from gpupack.report.usage import Window
from gpupack.testing.history import (
    PROMETHEUS,
    PROMTOOL,
    Device,
    HistoryNode,
    PrometheusServer,
    backfill,
    constant,
    write_openmetrics,
)
from gpupack.testing.scheduler import SchedulerProcess, write_scheduler_openmetrics
from tests.preemption_kit import churn_cluster

D, H = 86400.0, 3600.0
END = 1793577600.0  # 2026-11-02T00:00:00Z
START = END - 7 * D
WEEK = Window(START, END)
LEADER, STANDBY = "10.0.0.1:10259", "10.0.0.2:10259"


def burst(at: float, n: int) -> list[float]:
    """`n` attempts within a second of `at`."""
    return [at + i / (n + 1) for i in range(n)]


PROCESSES = [
    # The leader until it restarts on day 3: 3 attempts and a 4-victim preemption the day before the week (in its
    # counters at the start, not in the week's increase), then 10 attempts and preemptions of 3 and 1 on day 1.
    SchedulerProcess(
        "kube-scheduler",
        LEADER,
        started=START - 2 * D,
        stopped=START + 3 * D,
        attempts=burst(START - 2 * H, 3) + burst(START + D, 10),
        preemptions=[(START - 2 * H, 4), (START + D, 3), (START + D + 1, 1)],
    ),
    # Its next process (counters from zero): 5 attempts and an 8-victim preemption on day 5, and 7 attempts and a
    # 16-victim preemption after the week.
    SchedulerProcess(
        "kube-scheduler",
        LEADER,
        started=START + 3 * D,
        attempts=burst(START + 5 * D, 5) + burst(END + 2 * H, 7),
        preemptions=[(START + 5 * D, 8), (END + 2 * H, 16)],
    ),
    SchedulerProcess("kube-scheduler", STANDBY, started=START - 2 * D),
    # gpupack's scheduler: 4 attempts and two 2-victim preemptions on day 2, one attempt that took nobody on day 6.
    SchedulerProcess(
        "gpupack-scheduler",
        "10.0.1.5:10259",
        started=START - 2 * D,
        attempts=[*burst(START + 2 * D, 4), START + 6.5 * D],
        preemptions=[(START + 2 * D, 2), (START + 2 * D + 1, 2)],
    ),
]
WEEKS_CHURN = Churn((SchedulerChurn("gpupack-scheduler", 5, 2, 4), SchedulerChurn("kube-scheduler", 15, 3, 12)))
"""By hand: kube-scheduler 10 + 5 attempts, 2 + 1 preemptions, 3 + 1 + 8 victims; gpupack's 4 + 1, 2, 2 + 2."""
GPU = Device(
    0,
    {GPU_UTIL: constant(60), GR_ENGINE_ACTIVE: constant(0.5), FB_USED: constant(1000), FB_FREE: constant(80000)},
)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus over the planted history: scheduler metrics from two days before the week to a day after,
    DCGM from eight days before."""
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")
    workdir = tmp_path_factory.mktemp("churn")
    scheduler = workdir / "scheduler.om"
    with scheduler.open("w") as out:
        assert write_scheduler_openmetrics(out, PROCESSES, np.arange(START - 2 * D, END + D, 300.0)) > 0
    backfill(scheduler, workdir / "tsdb", block_hours=162)
    dcgm = workdir / "dcgm.om"
    with dcgm.open("w") as out:
        write_openmetrics(out, [HistoryNode("n1", [GPU])], np.arange(START - 8 * D, END + D, 300.0))
    backfill(dcgm, workdir / "tsdb", block_hours=162)
    with PrometheusServer(workdir / "tsdb", oldest=START - 8 * D) as server:
        yield server.url
    shutil.rmtree(workdir, ignore_errors=True)


def churn(url: str, window: Window) -> Churn | None:
    source = PrometheusUsage(url)
    try:
        return read_churn(source, window)
    finally:
        source.close()


def test_the_weeks_churn_per_scheduler_is_what_was_planted_in_it(prometheus: str) -> None:
    found = churn(prometheus, WEEK)
    assert found == WEEKS_CHURN
    assert found is not None and (found.attempts, found.preemptions, found.victims) == (20, 5, 16)


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        # day 1 alone: the leader's 10 attempts and 3 + 1 victims; gpupack's scheduler reports zeros
        (
            Window(START + 0.5 * D, START + 1.5 * D),
            Churn((SchedulerChurn("gpupack-scheduler", 0, 0, 0), SchedulerChurn("kube-scheduler", 10, 2, 4))),
        ),
        # across the restart on day 3: the new process's 5 attempts and 8 victims, none lost to the reset
        (
            Window(START + 2.5 * D, START + 5.5 * D),
            Churn((SchedulerChurn("gpupack-scheduler", 0, 0, 0), SchedulerChurn("kube-scheduler", 5, 1, 8))),
        ),
        # the day after the week: only what came after it
        (
            Window(END, END + D - 600),
            Churn((SchedulerChurn("gpupack-scheduler", 0, 0, 0), SchedulerChurn("kube-scheduler", 7, 1, 16))),
        ),
    ],
    ids=["day-1", "restart", "after"],
)
def test_a_shorter_window_counts_only_what_happened_in_it(prometheus: str, window: Window, expected: Churn) -> None:
    assert churn(prometheus, window) == expected


def test_a_window_without_the_schedulers_metrics_reads_none(prometheus: str) -> None:
    assert churn(prometheus, Window(START - 8 * D, START - 3 * D)) is None


def _report(*args: str) -> dict[str, Any]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", *args, "--json"]) == 0
    document: dict[str, Any] = json.loads(buffer.getvalue())
    return document


def test_the_report_joins_the_schedulers_numbers_and_the_events_workloads(prometheus: str, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": churn_cluster(START)}))
    document = _report("--prometheus-url", prometheus, "--cluster", str(cluster), "--end", str(END))
    (finding,) = [f for f in document["findings"] if f["kind"] == "preemption-churn"]
    evidence = finding["evidence"]
    assert (finding["severity"], finding["workload"]) == ("low", "Job ml/train")
    assert (evidence["victims"], evidence["attempts"], evidence["preemptions"]) == (16, 20, 5)
    assert (evidence["victims_per_attempt"], evidence["victims_per_preemption"]) == (0.8, 3.2)
    assert (evidence["event_victims"], evidence["event_gpu_victims"]) == (8, 5)
    assert evidence["schedulers"] == (
        "gpupack-scheduler: 4 victims, 2 preemptions, 5 attempts; "
        "kube-scheduler: 12 victims, 3 preemptions, 15 attempts"
    )


def test_without_a_cluster_the_report_has_the_numbers_and_says_how_to_name_the_workloads(prometheus: str) -> None:
    document = _report("--prometheus-url", prometheus, "--end", str(END))
    (finding,) = [f for f in document["findings"] if f["kind"] == "preemption-churn"]
    assert (finding["evidence"]["victims"], finding["evidence"]["event_victims"]) == (16, None)
    assert "kubectl get events -A --field-selector reason=Preempted -o json" in finding["action"]


def test_a_week_without_scheduler_metrics_has_no_churn_finding_and_no_error(prometheus: str) -> None:
    document = _report("--prometheus-url", prometheus, "--end", str(START - 2 * D))
    assert document["nodes"] and not [f for f in document["findings"] if f["kind"] == "preemption-churn"]
