"""`gpupack report --prometheus-url` end to end: a week of DCGM and kube-scheduler history backfilled into a real
Prometheus, a cluster file beside it, and each finding kind found on the node, GPU or pod planted for it and on no
other.

Every node is planted for one thing and kept clear of the others: busy GPUs (30 % or more, or most of their
memory) are not oversized, Deployment pods stay off spot, idle and underused nodes carry no pods but the one
planted to block the autoscaler. The history is at 5 min, from a day before the week to a day after it, with
other values outside the week, so a boundary read wrongly changes the numbers.
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
from gpupack.testing.dcgm import Workload
from gpupack.testing.history import (
    PROMETHEUS,
    PROMTOOL,
    Device,
    HistoryNode,
    PrometheusServer,
    Stint,
    backfill,
    constant,
    steps,
    write_openmetrics,
)
from gpupack.testing.scheduler import SchedulerProcess, write_scheduler_openmetrics
from tests.preemption_kit import preempted
from tests.report_cluster_kit import node, pod

D = 86400.0
END = 1793577600.0  # 2026-11-02T00:00:00Z
START = END - 7 * D
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
MIB = 81559.0


def whole(index: int, util: float, engine: float, used: float, pod_name: str | None = None) -> Device:
    """A whole H100 at `util` % (engine activity `engine`, 0-1) holding `used` MiB all week, 100 % outside it,
    mapped to `ml/<pod_name>` from a day before the week."""
    stints = () if pod_name is None else (Stint(START - D, Workload(pod_name, "ml")),)
    outside = [(END, 100.0)]
    return Device(
        index,
        {
            GPU_UTIL: steps(100, (START, util), *outside),
            GR_ENGINE_ACTIVE: steps(1.0, (START, engine), (END, 1.0)),
            FB_USED: constant(used),
            FB_FREE: constant(MIB - used),
        },
        stints=stints,
    )


def instance(profile: str, gid: int, engine: float, used: float, total: float) -> Device:
    """A MIG instance of GPU 0: no GPU_UTIL, as DCGM."""
    return Device(
        0,
        {GR_ENGINE_ACTIVE: constant(engine), FB_USED: constant(used), FB_FREE: constant(total - used)},
        mig=(profile, gid),
    )


HISTORY = [
    HistoryNode("idle", [whole(0, 3, 0.03, 1000), whole(1, 3, 0.03, 1000)]),
    HistoryNode("under", [whole(0, 20, 0.2, 1000), whole(1, 20, 0.2, 1000)]),
    HistoryNode("hot", [whole(0, 95, 0.9, 60000, "train-0"), whole(1, 95, 0.9, 60000, "train-0")]),
    # GPU 0 busy by GPU_UTIL (70 %) with its engine at 10 %: light kernels; GPU 1 at 60 % engine.
    HistoryNode("light", [whole(0, 70, 0.1, 30000), whole(1, 70, 0.6, 30000)]),
    # GPU 0 holds 70,000 MiB at 4 % all week for cache-0; GPU 1 busy.
    HistoryNode("held", [whole(0, 4, 0.03, 70000, "cache-0"), whole(1, 80, 0.7, 20000)]),
    # GPU 0 in MIG: its 3g.40gb at 38,500 of 40,448 MiB (95 %), its 4g.40gb at 5,000; GPU 1 whole.
    HistoryNode(
        "mig",
        [
            instance("3g.40gb", 1, 0.5, 38500, 40448),
            instance("4g.40gb", 2, 0.5, 5000, 40448),
            Device(
                1,
                {
                    GPU_UTIL: constant(50),
                    GR_ENGINE_ACTIVE: constant(0.5),
                    FB_USED: constant(20000),
                    FB_FREE: constant(MIB - 20000),
                },
            ),
        ],
        model=A100,
    ),
    # embed holds a whole GPU at 8 % with 4,000 MiB: oversized; the Job beside it is busy.
    HistoryNode("big", [whole(0, 8, 0.05, 4000, "embed-7d9f8c-abcde"), whole(1, 90, 0.8, 40000, "train-1")]),
    HistoryNode("shared", [whole(0, 60, 0.5, 30000, "chat-7d9f8c-qwert")]),
    HistoryNode("spot", [whole(0, 60, 0.5, 50000, "serve-0")]),
]
"""`dark`, a GPU node of the cluster, has no series at all."""
LATE = HistoryNode("late", [whole(0, 60, 0.5, 40000)])
"""Added by the autoscaler four days into the week: it reports for the last 72 hours only."""
LATE_FROM = START + 4 * D
SCHEDULER = SchedulerProcess(
    "kube-scheduler", "10.0.0.1:10259", START - D, attempts=[START + 2 * D], preemptions=[(START + 2 * D, 2)]
)
"""One preemption of two victims in the week: `preemption-churn` for the cluster, concerning no node."""


def _cluster() -> list[dict[str, Any]]:
    gpu1 = {"nvidia.com/gpu": "1"}
    shared = {"nvidia.com/gpu.shared": "4"}
    nodes = [node(n, 2) for n in ("idle", "under", "hot", "light", "held", "big", "dark")]
    nodes += [
        node("mig", 1, **{"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-4g.40gb": "1"}),
        node("shared", 0, **shared),
        node("spot", 1, spot=True),
    ]
    pods = [
        pod("stray", "idle", owner=None),  # a bare pod: NotReplicated keeps `idle` up
        pod("train-0", "hot", {"nvidia.com/gpu": "2"}, owner="Job", owner_name="train-0"),
        pod("cache-0", "held", gpu1, owner="Job", owner_name="cache"),
        pod("embed-7d9f8c-abcde", "big", gpu1, labels={"gpupack.io/workload": "inference"}),
        pod("train-1", "big", gpu1, owner="Job", owner_name="train-1"),
        pod(
            "chat-7d9f8c-qwert",
            "shared",
            {"nvidia.com/gpu.shared": "1"},
            labels={"gpupack.io/workload": "inference", "gpupack.io/latency": "critical"},
        ),
        pod("serve-0", "spot", gpu1, owner="StatefulSet", owner_name="serve"),
    ]
    # its two victims, gone: a Deployment's by its name, and a pod nothing names
    events = [preempted("embed-7d9f8c-q5x2m", START + 2 * D, on="big"), preempted("scratch", START + 2 * D)]
    return nodes + pods + events


PLANTED = {
    "idle-node": {("idle", None, None)},
    "underused-node": {("under", None, None)},
    "hot-node": {("hot", None, None)},
    "light-kernels": {("light", "0", None)},
    "unmeasured-node": {("dark", None, None)},
    "memory-held-idle": {("held", "0", "ml/cache-0")},
    "mig-near-oom": {("mig", "0/1", None)},
    "oversized-workload": {("big", None, None)},
    "shared-latency-critical": {("shared", None, "ml/chat-7d9f8c-qwert")},
    "inference-on-spot": {("spot", None, "ml/serve-0")},
    "scale-down-blocker": {("idle", None, "ml/stray")},
    "preemption-churn": {(None, None, None)},
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The Prometheus URL over the planted week, and the cluster file."""
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")
    workdir = tmp_path_factory.mktemp("planted")
    text = workdir / "dcgm.om"
    with text.open("w") as out:
        write_openmetrics(out, HISTORY, np.arange(START - D, END + D, 300.0))
    backfill(text, workdir / "tsdb", block_hours=162)
    late = workdir / "late.om"
    with late.open("w") as out:
        write_openmetrics(out, [LATE], np.arange(LATE_FROM, END + D, 300.0))
    backfill(late, workdir / "tsdb", block_hours=162)  # its own blocks, overlapping the others
    scheduler = workdir / "scheduler.om"
    with scheduler.open("w") as out:
        write_scheduler_openmetrics(out, [SCHEDULER], np.arange(START - D, END + D, 300.0))
    backfill(scheduler, workdir / "tsdb", block_hours=162)
    cluster = workdir / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": _cluster()}))
    with PrometheusServer(workdir / "tsdb", oldest=START - D) as server:
        yield server.url, cluster
    shutil.rmtree(workdir, ignore_errors=True)


def _report(*args: str) -> dict[str, Any]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", *args, "--json"]) == 0
    document: dict[str, Any] = json.loads(buffer.getvalue())
    return document


@pytest.fixture(scope="module")
def document(planted: tuple[str, Path]) -> dict[str, Any]:
    """The `--json` report of the planted week."""
    return _report("--prometheus-url", planted[0], "--cluster", str(planted[1]), "--end", str(END))


def test_each_finding_kind_is_found_on_what_was_planted_for_it_and_nothing_else(document: dict[str, Any]) -> None:
    found: dict[str, set[tuple[str | None, str | None, str | None]]] = {}
    for f in document["findings"]:
        found.setdefault(f["kind"], set()).add((f["node"], f["gpu"], f["pod"]))
    assert found == PLANTED
    oversized = next(f for f in document["findings"] if f["kind"] == "oversized-workload")
    assert oversized["workload"] == "Deployment ml/embed"
    blocker = next(f for f in document["findings"] if f["kind"] == "scale-down-blocker")
    assert blocker["evidence"]["reason"] == "NotReplicated"
    churn = next(f for f in document["findings"] if f["kind"] == "preemption-churn")
    assert (churn["workload"], churn["evidence"]["victims"], churn["evidence"]["event_victims"]) == (
        "Deployment ml/embed",
        2,
        2,
    )


def test_the_report_page_documents_every_finding_kind_in_its_table() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "admins" / "report.md"
    table = [line for line in page.read_text().splitlines() if line.startswith("| `")]
    assert all(any(line.startswith(f"| `{kind}` |") for line in table) for kind in PLANTED)


def test_the_means_are_the_planted_weeks(document: dict[str, Any]) -> None:
    nodes = {n["node"]: n for n in document["nodes"]}
    # Each node's mean over its GPUs; the MIG GPU folds its instances by compute slices: (3 * 50 + 4 * 50) / 7.
    expected = {
        "idle": 3,
        "under": 20,
        "hot": 95,
        "light": 70,
        "held": (4 + 80) / 2,
        "mig": (50 + 50) / 2,
        "big": (8 + 90) / 2,
        "shared": 60,
        "spot": 60,
        "late": 60,
    }
    assert {n: nodes[n]["util_mean"] for n in expected} == pytest.approx(expected, abs=0.05)
    assert {n: c["class"] for n, c in nodes.items() if n in expected} == {
        "idle": "idle",
        "under": "underused",
        "hot": "hot",
        **{n: "ok" for n in ("light", "held", "mig", "big", "shared", "spot", "late")},
    }
    summary = document["summary"]
    assert (summary["gpus"], summary["nodes_idle"], summary["nodes_underused"], summary["nodes_hot"]) == (17, 1, 2, 1)
    assert document["window"] == {"start": "2026-10-26T00:00:00Z", "end": "2026-11-02T00:00:00Z"}
    assert document["source"].startswith("Prometheus http://127.0.0.1:")
    light = next(f for f in document["findings"] if f["kind"] == "light-kernels")
    assert (light["evidence"]["util_mean"], light["evidence"]["engine_mean"]) == pytest.approx((70.0, 10.0))
    oom = next(f for f in document["findings"] if f["kind"] == "mig-near-oom")
    assert oom["evidence"]["profile"] == "3g.40gb"


def test_the_idle_gpu_hours_count_the_hours_each_node_reported(document: dict[str, Any]) -> None:
    """Idle GPU-hours are each node's GPU-hours times (1 - its mean): 168 h per GPU, but 72 h for `late`."""
    expected = {"idle": 3, "under": 20, "hot": 95, "light": 70, "held": 42, "mig": 50, "big": 49, "shared": 60}
    gpus = {"idle": 2, "under": 2, "hot": 2, "light": 2, "held": 2, "mig": 2, "big": 2, "shared": 1}
    week = sum(gpus[n] * 168 * (1 - u / 100) for n, u in expected.items()) + 168 * 0.4  # spot: 1 GPU at 60 %
    assert document["summary"]["idle_gpu_hours"] == pytest.approx(week + 72 * 0.4, abs=0.5)


def test_a_node_that_came_mid_window_counts_only_its_hours_before_and_after(planted: tuple[str, Path]) -> None:
    """`late` reports from day 4: in the week's second half (84 h) its GPU is there 72 h, in the first none."""
    half = START + 3.5 * D
    doc = _report("--prometheus-url", planted[0], "--end", str(END), "--before", f"{START:.0f}..{half:.0f}",
                  "--after", f"{half:.0f}..{END:.0f}")  # fmt: skip
    before, after = doc["compare"]["before"], doc["compare"]["after"]
    assert after["gpu_hours"] - before["gpu_hours"] == pytest.approx(72, abs=1)
    # gpu_nodes_in_use is node-hours over the window: `late` adds 72 / 84 of a node
    assert after["gpu_nodes_in_use"] - before["gpu_nodes_in_use"] == pytest.approx(72 / 84, abs=0.02)


def test_before_and_after_with_a_work_query_count_each_windows_work(planted: tuple[str, Path]) -> None:
    half = START + 3.5 * D
    work = "sum(count_over_time(DCGM_FI_DEV_GPU_UTIL[{window}]))"  # a stand-in business metric: samples taken
    before, after = f"{START:.0f}..{half:.0f}", f"{half:.0f}..{END:.0f}"
    doc = _report(
        "--prometheus-url", planted[0], "--end", str(END), "--before", before, "--after", after, "--work-query", work
    )
    compare = doc["compare"]
    # 15 whole-GPU GPU_UTIL series (the MIG GPU has none) x 3.5 days at 5 min = 15 x 1,008 samples per side, and
    # `late`'s 72 hours (864 samples) after; 16 GPUs (the MIG GPU folded) reported all 84 hours of each side, and
    # `late`'s one GPU its 72.
    assert (compare["before"]["work"], compare["after"]["work"]) == (15 * 1008, 15 * 1008 + 864)
    assert (compare["before"]["gpu_hours"], compare["after"]["gpu_hours"]) == (16 * 84, 16 * 84 + 72)
    assert compare["work_unit"] == "unit of --work-query"
    assert compare["effective"] is False  # the same week twice: nothing changed


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            ["--work-query", "sum(increase(nothing[{window}]))"],
            "--work-query gave no series for 2026-10-26T00:00:00Z..",
        ),
        (["--work-query", "vector(NaN)"], "--work-query gave no finite value"),
        (["--work-query", "sum(("], "HTTP Status Code 400"),
    ],
)
def test_a_work_query_without_a_number_is_refused_naming_it(
    planted: tuple[str, Path], extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    span = ["--before", f"{START:.0f}..{START + D:.0f}", "--after", f"{START + D:.0f}..{START + 2 * D:.0f}"]
    assert main(["report", "--prometheus-url", planted[0], "--end", str(END), *span, *extra, "--json"]) == 2
    err = capsys.readouterr().err
    assert said in err and f"Prometheus {planted[0]}" in err


@pytest.mark.parametrize("url", ["localhost:9090", "ftp://prometheus", ""])
def test_a_prometheus_url_that_is_not_http_is_refused(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--prometheus-url", url]) == 2
    assert "give an http:// or https:// URL" in capsys.readouterr().err
