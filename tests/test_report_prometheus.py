"""PrometheusUsage against a real Prometheus holding a planted week of DCGM history, worked out by hand.

The history (`gpupack.testing.history`) is written as OpenMetrics at 5 min resolution from a day before the window
to a day after it, backfilled with promtool into a TSDB, and served by Debian's `prometheus` (no scrape target).
The window is the week [START, END); values outside it differ, so a boundary read wrongly changes the numbers.
"""

from __future__ import annotations

import http.server
import math
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE
from gpupack.core.policy import MetricsPolicy
from gpupack.core.thresholds import Thresholds
from gpupack.report.prometheus import QUERIES, PrometheusError, PrometheusUsage
from gpupack.report.usage import GpuUsage, Usage, Window
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
from gpupack.testing.net import free_port

D = 86400.0
END = 1793577600.0  # 2026-11-02T00:00:00Z: a fixed time in the past, passed explicitly
START = END - 7 * D
WINDOW = Window(START, END)
RESOLUTION = 300.0
EXPORTER = "nvidia-dcgm-exporter-x7k2p"
SERVICEMONITOR = {
    "namespace": "gpu-operator",
    "pod": EXPORTER,
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
}


def whole(index: int, util, engine, used, total: float, stints=()) -> Device:  # type: ignore[no-untyped-def]
    """A whole GPU: util in percent, engine 0-1, framebuffer used (a function of time) of `total` MiB."""
    return Device(
        index,
        {GPU_UTIL: util, GR_ENGINE_ACTIVE: engine, FB_USED: used, FB_FREE: lambda t: total - used(t)},
        stints=tuple(stints),
    )


def instance(index: int, profile: str, gid: int, engine: float, used: float, total: float, stints=()) -> Device:  # type: ignore[no-untyped-def]
    return Device(
        index,
        {GR_ENGINE_ACTIVE: constant(engine), FB_USED: constant(used), FB_FREE: constant(total - used)},
        mig=(profile, gid),
        stints=tuple(stints),
    )


def with_nan_at(at: float, values):  # type: ignore[no-untyped-def]
    def out(t: np.ndarray) -> np.ndarray:
        v = values(t)
        v[t == at] = math.nan
        return v

    return out


ml = lambda name: Workload(name, "ml")  # noqa: E731
NODES = [
    # An exporter from before dcgm-exporter #655 (`Hostname`), scraped directly: `pod` is the workload.
    HistoryNode(
        "h100-old",
        [
            # 80 % for two days under llm-0, then 10 % for five under llm-1 (a second series); 100 % outside.
            whole(
                0,
                steps(100, (START, 80), (START + 2 * D, 10), (END, 100)),
                steps(1.0, (START, 0.4), (START + 2 * D, 0.05), (END, 1.0)),
                steps(80000, (START, 60000), (START + 2 * D, 8000), (END, 80000)),
                80000,
                [Stint(START - D, ml("llm-0")), Stint(START + 2 * D, ml("llm-1")), Stint(END, ml("llm-2"))],
            ),
            # Memory held at 87.5 % all week; 5 % compute for four days, then 60 %.
            whole(1, steps(5, (START + 4 * D, 60)), steps(0.02, (START + 4 * D, 0.5)), constant(70000), 80000),
        ],
        host_label="Hostname",
    ),
    # A new exporter (`hostname`): a MIG GPU (3g.40gb busy at 0.5 for chat-1, 4g.40gb at 0.25 for no pod) and a
    # whole GPU at 90 % for a day under batch-0, one of whose GPU_UTIL samples is NaN, then 30 % for six days.
    HistoryNode(
        "a100-new",
        [
            instance(0, "3g.40gb", 1, 0.5, 30000, 40000, [Stint(START - D, ml("chat-1"))]),
            instance(0, "4g.40gb", 2, 0.25, 2000, 40000),
            whole(
                1,
                with_nan_at(START + 3600, steps(90, (START + D, 30))),
                steps(0.6, (START + D, 0.2)),
                constant(40000),
                80000,
                [Stint(START - D, ml("batch-0")), Stint(START + D, None)],
            ),
        ],
        model="NVIDIA A100-SXM4-80GB",
    ),
    # Scraped through a ServiceMonitor: `pod` is the exporter's own, the workload is `exported_pod`.
    HistoryNode(
        "h100-op",
        [
            whole(
                0,
                constant(64),
                constant(0.5),
                constant(20000),
                80000,
                [Stint(START - D, Workload("embed-0", "search"))],
            ),
            whole(1, constant(0), constant(0), constant(0), 80000),
        ],
        target=SERVICEMONITOR,
    ),
    # The exporter upgraded past #655 three days in: `Hostname` then `hostname`, still one node. The guide's
    # (docs/method.md) T4: 91 % GPU_UTIL at 0.156 engine activity.
    HistoryNode(
        "t4-renamed",
        [whole(0, constant(91), constant(0.156), constant(12000), 15360)],
        model="Tesla T4",
        host_label="Hostname",
        renamed_at=START + 3 * D,
    ),
]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The Prometheus URL and the number of samples written."""
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")
    workdir = tmp_path_factory.mktemp("history")
    text = workdir / "dcgm.om"
    times = np.arange(START - D, END + D, RESOLUTION)
    with text.open("w") as out:
        written = write_openmetrics(out, NODES, times)
    backfill(text, workdir / "tsdb", block_hours=162)
    with PrometheusServer(workdir / "tsdb", oldest=START - D) as server:
        yield server.url, written
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def usage(history: tuple[str, int]) -> Usage:
    source = PrometheusUsage(history[0])
    try:
        return source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


def gpu(usage: Usage, node: str, index: str, instance: str | None = None) -> GpuUsage:
    found = [g for g in usage.gpus if (g.node, g.gpu, g.instance) == (node, index, instance)]
    assert len(found) == 1, [(g.node, g.gpu, g.instance) for g in usage.gpus]
    return found[0]


def test_every_device_of_both_host_label_spellings_is_read_once(usage: Usage) -> None:
    assert [(g.node, g.gpu, g.instance, g.profile) for g in usage.gpus] == [
        ("a100-new", "0", "1", "3g.40gb"),
        ("a100-new", "0", "2", "4g.40gb"),
        ("a100-new", "1", None, None),
        ("h100-old", "0", None, None),
        ("h100-old", "1", None, None),
        ("h100-op", "0", None, None),
        ("h100-op", "1", None, None),
        ("t4-renamed", "0", None, None),
    ]
    assert usage.source == f"Prometheus {usage.source.split()[1]}" and usage.window == WINDOW
    assert gpu(usage, "a100-new", "1").model == "NVIDIA A100-SXM4-80GB"
    assert gpu(usage, "t4-renamed", "0").model == "Tesla T4"


def test_means_weigh_each_pods_series_by_its_samples_within_the_window(usage: Usage) -> None:
    g = gpu(usage, "h100-old", "0")
    # Two days at 80 % under llm-0 and five at 10 % under llm-1 (the 100 % outside the window is not read):
    # (2 * 80 + 5 * 10) / 7 = 30 (the two series' plain mean would be 45).
    assert g.util_mean == pytest.approx(30.0)
    assert g.engine_mean == pytest.approx((2 * 40 + 5 * 5) / 7)  # 15 %
    assert g.fb_used_mean == pytest.approx((2 * 60000 + 5 * 8000) / 7)  # 22,857 MiB
    assert g.fb_used_max == pytest.approx(60000)
    assert g.fb_total == pytest.approx(80000)
    assert g.pods == {"ml/llm-0", "ml/llm-1"}  # not llm-2, which starts at the window's end
    g = gpu(usage, "h100-old", "1")
    assert g.util_mean == pytest.approx((4 * 5 + 3 * 60) / 7)  # 28.57 %
    assert g.engine_mean == pytest.approx((4 * 2 + 3 * 50) / 7)  # 22.57 %
    assert (g.fb_used_mean, g.fb_used_max, g.fb_total) == pytest.approx((70000, 70000, 80000))
    assert g.pods == frozenset()


def test_p95_is_over_the_grid_of_the_whole_week(usage: Usage) -> None:
    # 10,080 one-minute points; the 95th percentile's rank 0.95 * 10,079 = 9,575 lies among the top values:
    # h100-old/0 has 2,880 points at 80 above 7,200 at 10, h100-old/1 4,320 at 60 above 5,760 at 5.
    assert gpu(usage, "h100-old", "0").util_p95 == pytest.approx(80.0)
    assert gpu(usage, "h100-old", "1").util_p95 == pytest.approx(60.0)
    assert gpu(usage, "h100-op", "0").util_p95 == pytest.approx(64.0)
    assert gpu(usage, "a100-new", "0", "1").util_p95 is None  # no GPU_UTIL for MIG instances


def test_held_idle_is_the_fraction_of_the_week_with_memory_held_and_compute_idle(usage: Usage) -> None:
    # 70,000 of 80,000 MiB (>= 50 %) all week, GPU_UTIL 5 % (< 10 %) for four days of seven.
    assert gpu(usage, "h100-old", "1").held_idle == pytest.approx(4 / 7)
    assert gpu(usage, "h100-old", "0").held_idle == pytest.approx(0.0)  # 75 % memory at 80 %, then 10 % memory
    # The 3g instance holds 75 % of its memory at 50 % engine activity: not idle.
    assert gpu(usage, "a100-new", "0", "1").held_idle == pytest.approx(0.0)
    assert gpu(usage, "h100-op", "1").held_idle == pytest.approx(0.0)  # idle, but holding nothing


def test_mig_instances_have_engine_activity_and_memory_and_fold_by_slices(usage: Usage) -> None:
    three, four = gpu(usage, "a100-new", "0", "1"), gpu(usage, "a100-new", "0", "2")
    assert (three.util_mean, three.engine_mean, three.fb_used_max, three.fb_total) == (None, 50.0, 30000, 40000)
    assert (four.util_mean, four.engine_mean, four.fb_used_max, four.fb_total) == (None, 25.0, 2000, 40000)
    assert three.pods == {"ml/chat-1"} and four.pods == frozenset()
    folded = next(g for g in usage.physical() if (g.node, g.gpu) == ("a100-new", "0"))
    assert folded.engine_mean == pytest.approx((3 * 50 + 4 * 25) / 7)  # 35.71 %


def test_a_series_holding_a_nan_is_skipped_and_nothing_fails(usage: Usage) -> None:
    g = gpu(usage, "a100-new", "1")
    # batch-0's GPU_UTIL series (90 %, one NaN) is left out of the mean: the other series, 30 % for six days.
    assert g.util_mean == pytest.approx(30.0)
    # Its engine activity has no NaN: both series count, (1 * 60 + 6 * 20) / 7.
    assert g.engine_mean == pytest.approx(180 / 7)
    # The grid skips only the NaN point (5 of 10,080 minutes read it): the day at 90 % is 14 % of the week.
    assert g.util_p95 == pytest.approx(90.0)
    assert g.pods == {"ml/batch-0"}


def test_both_gpu_util_and_engine_activity_are_reported_where_both_exist(usage: Usage) -> None:
    g = gpu(usage, "t4-renamed", "0")
    assert (g.util_mean, g.engine_mean) == pytest.approx((91.0, 15.6))
    assert g.utilization("gpu-util") == pytest.approx(91.0)
    assert g.utilization("engine-active") == pytest.approx(15.6)


def test_workloads_come_from_pod_or_exported_pod_never_the_exporters_own_pod(usage: Usage) -> None:
    assert gpu(usage, "h100-op", "0").pods == {"search/embed-0"}
    assert gpu(usage, "h100-op", "1").pods == frozenset()  # its series carry only the exporter's pod
    assert gpu(usage, "h100-old", "0").pods == {"ml/llm-0", "ml/llm-1"}


def test_hourly_means_per_node_over_its_gpus(usage: Usage) -> None:
    assert set(usage.hourly) == {"a100-new", "h100-old", "h100-op", "t4-renamed"}
    assert all(len(hours) == 168 for hours in usage.hourly.values())
    old = usage.hourly["h100-old"]
    # (80 + 5) / 2 for two days, (10 + 5) / 2 for two, then (10 + 60) / 2.
    assert old == pytest.approx((42.5,) * 48 + (7.5,) * 48 + (35.0,) * 72)
    mig = (3 * 50 + 4 * 25) / 7
    new = usage.hourly["a100-new"]
    # The MIG GPU at 35.71 % beside the whole GPU: 90 % on day one, then 30 %. In hour 1 a NaN leaves the whole
    # GPU no GPU_UTIL mean, and that hour is the MIG GPU's alone (engine activity stands in only for a GPU that
    # has no GPU_UTIL at all).
    assert new[0] == pytest.approx((mig + 90) / 2)
    assert new[1] == pytest.approx(mig)
    assert new[2:24] == pytest.approx(((mig + 90) / 2,) * 22)
    assert new[24:] == pytest.approx(((mig + 30) / 2,) * 144)
    assert usage.hourly["h100-op"] == pytest.approx((32.0,) * 168)
    assert usage.hourly["t4-renamed"] == pytest.approx((91.0,) * 168)
    nodes = usage.nodes()
    assert nodes["h100-old"].util_mean == pytest.approx((30 + 200 / 7) / 2)
    assert nodes["a100-new"].gpus == 2


def test_engine_active_metric_reads_engine_activity_for_the_heatmap(history: tuple[str, int]) -> None:
    source = PrometheusUsage(history[0])
    try:
        usage = source.usage(WINDOW, "engine-active", Thresholds())
    finally:
        source.close()
    assert usage.metric == "engine-active"
    assert usage.hourly["t4-renamed"] == pytest.approx((15.6,) * 168)
    assert usage.hourly["h100-old"][:48] == pytest.approx(((40 + 2) / 2,) * 48)
    # Compute idle by engine activity: 2 % for four days on h100-old/1, as by GPU_UTIL.
    assert gpu(usage, "h100-old", "1").held_idle == pytest.approx(4 / 7)


def test_a_named_node_label_is_the_only_one_read(history: tuple[str, int]) -> None:
    source = PrometheusUsage.from_policy(history[0], MetricsPolicy(node_label="hostname"))
    try:
        usage = source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()
    assert {g.node for g in usage.gpus} == {"a100-new", "h100-op", "t4-renamed"}
    assert set(usage.hourly) == {"a100-new", "h100-op", "t4-renamed"}
    t4 = usage.hourly["t4-renamed"]  # only from the upgrade on
    assert t4[:72] == (None,) * 72 and t4[72:] == pytest.approx((91.0,) * 96)


def test_few_numbers_are_pulled_and_progress_is_reported(history: tuple[str, int], usage: Usage) -> None:
    url, written = history
    # 4 nodes x 168 hours, and a few numbers per series and device, out of ~60,000 samples written.
    assert 4 * 168 < usage.samples < 1000
    assert written > 60 * usage.samples
    calls: list[tuple[str, int, int]] = []
    source = PrometheusUsage(url)
    try:
        source.usage(
            WINDOW, "gpu-util", Thresholds(), progress=lambda what, done, total: calls.append((what, done, total))
        )
    finally:
        source.close()
    assert [done for _, done, _ in calls] == list(range(QUERIES + 1))
    assert all(total == QUERIES for _, _, total in calls)


# failures ---------------------------------------------------------------------------------------------------------


def test_a_prometheus_that_is_down_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    source = PrometheusUsage(url)
    try:
        with pytest.raises(
            PrometheusError, match=rf"Prometheus {url}: cannot connect: .*Connection refused; query: \w+_over_time\("
        ):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 500
    body = b'{"status":"error","errorType":"internal","error":"boom"}'

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[type[_Answer]]:
    """A stand-in server (a real Prometheus does not answer 500 on demand) with a settable answer."""
    handler = type("Handler", (_Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_http_500_is_an_os_error_naming_the_url_and_the_query(answering: type[_Answer]) -> None:
    url = answering.url  # type: ignore[attr-defined]
    source = PrometheusUsage(url)
    try:
        with pytest.raises(PrometheusError, match=rf"Prometheus {url}: HTTP Status Code 500 .*boom.*; query: "):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


def test_an_answer_that_is_not_json_is_a_value_error(answering: type[_Answer]) -> None:
    answering.status, answering.body = 200, b"<html>a proxy's login page</html>"
    source = PrometheusUsage(answering.url)  # type: ignore[attr-defined]
    try:
        with pytest.raises(ValueError, match="the answer is not JSON"):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


def test_a_query_prometheus_refuses_is_named(history: tuple[str, int]) -> None:
    source = PrometheusUsage(history[0], node_label="not a label")
    try:
        with pytest.raises(PrometheusError, match=r"HTTP Status Code 400 .*bad_data.*; query: avg by \(not a label\)"):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


def test_a_prometheus_that_never_answers_times_out() -> None:
    with socket.socket() as silent:  # accepts connections into its backlog, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        source = PrometheusUsage(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_seconds=0.5)
        try:
            with pytest.raises(PrometheusError, match=r"no answer within 0.5s"):
                source.usage(WINDOW, "gpu-util", Thresholds())
        finally:
            source.close()


def test_credentials_in_the_url_never_reach_a_message_or_the_report() -> None:
    port = free_port()
    source = PrometheusUsage(f"http://admin:s3cret@127.0.0.1:{port}")
    try:
        assert source.shown == f"http://127.0.0.1:{port}"
        with pytest.raises(PrometheusError) as caught:
            source.usage(WINDOW, "gpu-util", Thresholds())
        assert "s3cret" not in str(caught.value) and "admin" not in str(caught.value)
        assert f"Prometheus http://127.0.0.1:{port}: cannot connect" in str(caught.value)
    finally:
        source.close()


def test_headers_go_with_every_query(answering: type[_Answer]) -> None:
    """A Mimir tenant and a token, as `--prometheus-header` and `--prometheus-bearer-token-file` give them."""
    seen: list[dict[str, str]] = []
    answering.body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    answering.status = 200
    original = answering.do_GET

    def record(self: _Answer) -> None:
        seen.append(dict(self.headers))
        original(self)

    answering.do_GET = record  # type: ignore[method-assign]
    source = PrometheusUsage(answering.url, headers={"X-Scope-OrgID": "team-a", "Authorization": "Bearer t0k"})  # type: ignore[attr-defined]
    try:
        with pytest.raises(ValueError, match="no DCGM exporter series"):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()
    assert len(seen) == QUERIES
    assert all(h.get("X-Scope-OrgID") == "team-a" and h.get("Authorization") == "Bearer t0k" for h in seen)


def test_series_without_the_named_node_label_are_an_error_that_names_it(history: tuple[str, int]) -> None:
    source = PrometheusUsage(history[0], node_label="kubernetes_node")
    try:
        with pytest.raises(ValueError, match=r"none with a node label \(kubernetes_node\).*extender.metrics.nodeLabel"):
            source.usage(WINDOW, "gpu-util", Thresholds())
    finally:
        source.close()


def test_a_window_without_dcgm_data_is_an_error_not_an_empty_report(history: tuple[str, int]) -> None:
    source = PrometheusUsage(history[0])
    try:
        empty = Window(START - 30 * D, START - 23 * D)
        with pytest.raises(ValueError, match=r"no DCGM exporter series .* scrape the DCGM exporter"):
            source.usage(empty, "gpu-util", Thresholds())
    finally:
        source.close()
