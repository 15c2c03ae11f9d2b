"""PrometheusSource against a real Prometheus scraping local DCGM exporter endpoints, and the staleness path.

One Prometheus per module on a free loopback port scrapes, every second, four exporters served by an aiohttp app
in a thread: an old exporter (`Hostname`) and a new one (`hostname`) scraped directly, so the exporter's `pod`
stays `pod`; a MIG node and a whole-GPU node scraped as prometheus-operator's ServiceMonitor does (the target
carries `namespace, pod, container, service, endpoint`; with honor_labels false Prometheus renames the
exporter's colliding labels to `exported_*`); and one the staleness test makes fail.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from aiohttp import web

from gpupack.core.dcgm import GPU_UTIL
from gpupack.core.policy import MetricsPolicy
from gpupack.extender.live import LiveMetrics, aggregate
from gpupack.extender.sources import LiveMetricsCache, PrometheusSource
from gpupack.testing.dcgm import Gpu, MigGpu, MigInstance, Node, Workload, exposition

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
POLICY = MetricsPolicy(window="10s", poll_seconds=1, max_age_seconds=3, timeout_seconds=2)
EXPORTER_POD = "nvidia-dcgm-exporter-x7k2p"
T = TypeVar("T")

EXPORTERS: dict[str, list[Node]] = {
    "old": [
        Node("h100-old", [Gpu(37.0, workload=Workload("llm-0", "ml")), Gpu(80.0)], host_label="Hostname"),
    ],
    "new": [Node("h100-new", [Gpu(10.0)], host_label="hostname")],
    "mig": [
        Node(
            "a100-mig",
            [
                MigGpu(
                    [MigInstance("3g.40gb", 1, 0.5, workload=Workload("chat-1", "ml")), MigInstance("4g.40gb", 2, 0.25)]
                ),
                MigGpu([MigInstance("7g.80gb", 0, 0.9, workload=Workload("train-0", "ml"))]),
            ],
            model="NVIDIA A100-SXM4-80GB",
        )
    ],
    "operator": [Node("h100-op", [Gpu(64.0, workload=Workload("embed-0", "search"))])],
    "doomed": [Node("t4-doomed", [Gpu(55.0)], model="Tesla T4", host_label="Hostname")],
}
SERVICEMONITOR_TARGET = {
    "namespace": "gpu-operator",
    "pod": EXPORTER_POD,
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ExporterEndpoints:
    """DCGM exporters behind one aiohttp app in its own thread: `/<name>/metrics`, 503 while failing."""

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dcgm-exporters", daemon=True)
        app = web.Application()
        app.router.add_get("/{name}/metrics", self.metrics)
        self.runner = web.AppRunner(app, access_log=None)
        self.port = 0

    async def metrics(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in EXPORTERS:
            raise web.HTTPNotFound()
        if name in self.failing:
            raise web.HTTPServiceUnavailable()
        return web.Response(text=exposition(EXPORTERS[name]), content_type="text/plain", charset="utf-8")

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(5)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(5)
        self.port = self.runner.addresses[0][1]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def scrape_config(exporters_port: int) -> str:
    target = [f"127.0.0.1:{exporters_port}"]
    jobs: list[dict[str, object]] = []
    for name in EXPORTERS:
        config: dict[str, object] = {"targets": target}
        if name in ("mig", "operator"):
            config["labels"] = SERVICEMONITOR_TARGET
        jobs.append({"job_name": f"dcgm-{name}", "metrics_path": f"/{name}/metrics", "static_configs": [config]})
    doc = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}}
    doc["scrape_configs"] = jobs  # type: ignore[assignment]
    return json.dumps(doc)  # YAML is a superset of JSON


def http_json(url: str, timeout: float = 2.0) -> object:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:  # close its response now: a socket left to the GC warns (an error here)
        err.close()
        raise RuntimeError(f"{url}: HTTP {err.code}") from None


def until(predicate: Callable[[], T | None], what: str, deadline: float = 20.0, pause: float = 0.2) -> T:
    """Poll until the predicate returns something truthy (exceptions count as not yet)."""
    end = time.monotonic() + deadline
    last: BaseException | None = None
    while time.monotonic() < end:
        try:
            value = predicate()
        except Exception as exc:  # not ready yet
            last = exc
        else:
            if value:
                return value
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


@pytest.fixture(scope="module")
def exporters() -> Iterator[ExporterEndpoints]:
    endpoints = ExporterEndpoints()
    endpoints.start()
    yield endpoints
    endpoints.stop()


@pytest.fixture(scope="module")
def prometheus_url(exporters: ExporterEndpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(PROMETHEUS).exists():
        pytest.skip(f"no Prometheus server at {PROMETHEUS} (`make test` installs Debian's `prometheus`)")
    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(scrape_config(exporters.port))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("wb") as log_file:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {proc.returncode}: {(workdir / 'prometheus.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError as err:  # 503 while starting: close it, or its socket warns at GC time
                err.close()
                return False

        until(ready, "Prometheus /-/ready")

        def scraped() -> bool:
            data = http_json(f"{url}/api/v1/query?query=up")
            results = data["data"]["result"]  # type: ignore[index]
            return len(results) == len(EXPORTERS) and all(r["value"][1] == "1" for r in results)

        until(scraped, "the first scrape of every exporter")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def source(prometheus_url: str) -> Iterator[PrometheusSource]:
    src = PrometheusSource(prometheus_url)
    yield src
    src.close()


def read(source: PrometheusSource) -> LiveMetrics:
    return aggregate(source.read(POLICY), POLICY.node_label, time.time())


def utils(live: LiveMetrics) -> dict[str, dict[str, float | None]]:
    return {node: {i: g.util for i, g in gpus.items()} for node, gpus in live.nodes.items()}


def test_whole_gpus_of_old_and_new_exporters_are_read_under_both_host_labels(source: PrometheusSource) -> None:
    live = read(source)
    got = utils(live)
    assert got["h100-old"] == {"0": pytest.approx(0.37), "1": pytest.approx(0.80)}
    assert got["h100-new"] == {"0": pytest.approx(0.10)}
    assert got["h100-op"] == {"0": pytest.approx(0.64)}
    now = time.time()
    assert live.fresh_utils("h100-old", now, POLICY.max_age_seconds) == (pytest.approx(0.37), pytest.approx(0.80))
    assert all(now - gpu.at < 3 for gpu in live.nodes["h100-new"].values())


def test_mig_gpus_are_read_from_engine_activity_weighted_by_slices(source: PrometheusSource) -> None:
    series = source.read(POLICY)
    assert not [s for s in series if s.signal == GPU_UTIL and "GPU_I_ID" in s.labels]
    profiles = {s.labels["GPU_I_PROFILE"] for s in series if "GPU_I_PROFILE" in s.labels}
    assert profiles == {"3g.40gb", "4g.40gb", "7g.80gb"}
    got = utils(aggregate(series, None, time.time()))
    assert got["a100-mig"] == {"0": pytest.approx((3 * 0.5 + 4 * 0.25) / 7), "1": pytest.approx(0.9)}


def test_workload_pods_come_from_pod_when_scraped_directly_and_exported_pod_through_a_servicemonitor(
    source: PrometheusSource,
) -> None:
    series = source.read(POLICY)
    direct = [s.labels for s in series if s.labels.get("Hostname") == "h100-old" and s.labels["gpu"] == "0"]
    assert direct and all(labels["pod"] == "llm-0" and "exported_pod" not in labels for labels in direct)
    operator = [s.labels for s in series if s.labels.get("hostname") == "h100-op"]
    assert operator and all(
        (labels["exported_pod"], labels["exported_namespace"], labels["pod"]) == ("embed-0", "search", EXPORTER_POD)
        for labels in operator
    )
    live = aggregate(series, None, time.time())
    pods = {node: {i: g.pods for i, g in gpus.items()} for node, gpus in live.nodes.items()}
    assert pods["h100-old"] == {"0": {"llm-0"}, "1": set()}
    assert pods["h100-op"] == {"0": {"embed-0"}}
    # The 4g instance is idle: its series carry only the target's pod, the exporter's, which is no workload.
    assert pods["a100-mig"] == {"0": {"chat-1"}, "1": {"train-0"}}


async def test_a_failing_exporter_goes_stale_and_its_node_loses_fresh_utilization(
    exporters: ExporterEndpoints, source: PrometheusSource, prometheus_url: str
) -> None:
    reads: list[bool] = []
    cache = LiveMetricsCache(source, lambda: POLICY, reads.append)
    assert await cache.refresh()
    assert cache.snapshot.fresh_utils("t4-doomed", time.time(), POLICY.max_age_seconds) == (pytest.approx(0.55),)

    exporters.failing.add("doomed")
    try:
        deadline = time.monotonic() + 10
        while "t4-doomed" in cache.snapshot.nodes and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            assert await cache.refresh()
        # Prometheus wrote staleness markers after the failed scrape: timestamp() no longer has the series,
        # though the 10 s average still would, so the node drops out at once rather than after max_age.
        assert "t4-doomed" not in cache.snapshot.nodes
        window = http_json(f"{prometheus_url}/api/v1/query?query=avg_over_time(DCGM_FI_DEV_GPU_UTIL[10s])")
        assert any(r["metric"].get("Hostname") == "t4-doomed" for r in window["data"]["result"])  # type: ignore[index]
        assert cache.snapshot.fresh_utils("t4-doomed", time.time(), POLICY.max_age_seconds) == ()
        assert cache.snapshot.fresh_utils("h100-old", time.time(), POLICY.max_age_seconds)
        assert reads and all(reads)
    finally:
        exporters.failing.discard("doomed")


async def test_prometheus_down_keeps_the_last_snapshot_whose_samples_age_out(
    source: PrometheusSource, caplog: pytest.LogCaptureFixture
) -> None:
    reads: list[bool] = []
    cache = LiveMetricsCache(source, lambda: POLICY, reads.append)
    assert await cache.refresh()
    before = cache.snapshot
    newest = before.newest()
    assert newest is not None

    down = PrometheusSource(f"http://127.0.0.1:{free_port()}")
    cache.source = down
    try:
        with caplog.at_level(logging.INFO, logger="gpupack.extender.sources"):
            started = time.monotonic()
            assert not await cache.refresh()
            assert not await cache.refresh()
            assert time.monotonic() - started < 2, "a refused connection is not retried with back-off"
        assert cache.snapshot is before
        assert reads == [True, False, False]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "cannot read live GPU metrics" in warnings[0].getMessage()

        max_age = POLICY.max_age_seconds
        assert cache.snapshot.fresh_utils("h100-new", newest + 1, max_age) == (pytest.approx(0.10),)
        assert cache.snapshot.fresh_utils("h100-new", newest + max_age + 1, max_age) == ()

        cache.source = source
        with caplog.at_level(logging.INFO, logger="gpupack.extender.sources"):
            assert await cache.refresh()
        assert reads[-1] is True
        assert any("readable again" in r.getMessage() for r in caplog.records)
    finally:
        down.close()


def test_a_prometheus_that_never_answers_times_out() -> None:
    # A listening socket that is never accepted: the connection succeeds, the answer never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        src = PrometheusSource(f"http://127.0.0.1:{silent.getsockname()[1]}")
        try:
            started = time.monotonic()
            with pytest.raises(Exception, match="timed out"):
                src.read(MetricsPolicy(timeout_seconds=0.5))
            assert time.monotonic() - started < 2
        finally:
            src.close()
