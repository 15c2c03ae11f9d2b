"""A DCGM exporter history in a real Prometheus: OpenMetrics text with timestamps for a description of nodes, GPUs
and MIG instances whose values are functions of time, backfilled with `promtool tsdb create-blocks-from
openmetrics`, and a `prometheus` started over the TSDB. Shared by tests/test_report_prometheus.py (a week of a few
nodes at 5 min) and bench.report (a week of 500 nodes at 1 min).

The series are the exporter's (`gpupack.testing.dcgm.series_labels`): a pod change starts a new series, an
exporter upgraded past dcgm-exporter #655 switches `Hostname` to `hostname`, and a node scraped through a
ServiceMonitor carries the target's labels with the exporter's colliding ones renamed `exported_*`, as Prometheus
does with honor_labels false. OpenMetrics wants each family's lines together and each series' samples in time
order: the text is written family by family, series by series.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import numpy.typing as npt

from gpupack.testing.dcgm import HELP, HostLabel, Workload, label_set, series_labels
from gpupack.testing.net import free_port

Times = npt.NDArray[np.float64]
Values = Callable[[Times], npt.NDArray[np.float64]]
"""Sample times (epoch s) -> the signal's values at them; NaN is written as NaN."""
SIGNALS = tuple(HELP)
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@dataclass(frozen=True, slots=True)
class Stint:
    """From `start` on (until the next stint) the exporter maps the device to `workload` (None: to no pod)."""

    start: float
    workload: Workload | None


@dataclass(frozen=True, slots=True)
class Device:
    """A whole GPU (`mig` None) or one MIG instance (`(profile, id)`), each signal a function of time. A signal
    left out is not written (MIG instances have no GPU_UTIL)."""

    index: int
    signals: Mapping[str, Values]
    mig: tuple[str, int] | None = None
    stints: Sequence[Stint] = ()


@dataclass(frozen=True, slots=True)
class HistoryNode:
    """One node's exporter over time."""

    name: str
    devices: Sequence[Device]
    model: str = "NVIDIA H100 80GB HBM3"
    host_label: HostLabel = "hostname"
    renamed_at: float | None = None
    """From this time on the exporter writes `hostname` (upgraded past dcgm-exporter #655)."""
    target: Mapping[str, str] | None = None
    """A ServiceMonitor target's labels (`namespace`, `pod` of the exporter, ...), None when scraped directly."""
    driver_version: str | None = "550.90.07"


def constant(value: float) -> Values:
    """The same value at every time."""
    return lambda times: np.full(len(times), float(value))


def steps(start: float, *changes: tuple[float, float]) -> Values:
    """`start` until the first change's time, then each change's value from its time on: `steps(80, (t1, 10))`."""

    def values(times: Times) -> npt.NDArray[np.float64]:
        out = np.full(len(times), float(start))
        for at, value in changes:
            out[times >= at] = value
        return out

    return values


def _segments(node: HistoryNode, device: Device, times: Times) -> Iterator[tuple[int, int, dict[str, str]]]:
    """[lo, hi) index ranges of `times` with one label set each."""
    cuts = sorted({s.start for s in device.stints} | ({node.renamed_at} if node.renamed_at is not None else set()))
    bounds = [0, *(int(np.searchsorted(times, cut)) for cut in cuts), len(times)]
    for lo, hi in itertools.pairwise(bounds):
        if hi <= lo:
            continue
        at = float(times[lo])
        workload = next((s.workload for s in reversed(device.stints) if s.start <= at), None)
        host: HostLabel = "hostname" if node.renamed_at is not None and at >= node.renamed_at else node.host_label
        labels = series_labels(node.name, host, node.model, node.driver_version, device.index, device.mig, workload)
        if node.target is not None:
            for name in [k for k in labels if k in node.target]:
                labels[f"exported_{name}"] = labels.pop(name)
            labels.update(node.target)
        yield lo, hi, labels


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() else repr(value)


def _values(values: npt.NDArray[np.float64]) -> list[str]:
    if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
        return list(map(str, values.astype(np.int64).tolist()))  # the fast path: whole numbers
    return [_number(v) for v in values.tolist()]


def write_openmetrics(out: TextIO, nodes: Sequence[HistoryNode], times: Times, eof: bool = True) -> int:
    """Every series of `nodes` at `times` (sorted, epoch s), family by family; returns the samples written."""
    stamps = [f" {int(t)}\n" if float(t).is_integer() else f" {t!r}\n" for t in times.tolist()]
    written = 0
    for signal in SIGNALS:
        out.write(f"# HELP {signal} {HELP[signal]}\n# TYPE {signal} gauge\n")
        for node in nodes:
            for device in node.devices:
                values = device.signals.get(signal)
                if values is None:
                    continue
                text = _values(values(times))
                for lo, hi, labels in _segments(node, device, times):
                    prefix = f"{signal}{label_set(labels)} "
                    out.write("".join([prefix + v + s for v, s in zip(text[lo:hi], stamps[lo:hi], strict=True)]))
                    written += hi - lo
    if eof:
        out.write("# EOF\n")
    return written


def _promtool(openmetrics: Path, tsdb: Path, block_hours: int) -> subprocess.Popen[bytes]:
    command = [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    command += [f"--max-block-duration={block_hours}h", str(openmetrics), str(tsdb)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen[bytes], openmetrics: Path) -> None:
    output, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed on {openmetrics}: {output.decode(errors='replace').strip()}")


def backfill(openmetrics: Path, tsdb: Path, block_hours: int = 2) -> None:
    """Blocks of at most `block_hours` (promtool rounds to 2, 6, 18, 54, 162 h; it reads the file once per block)
    from the OpenMetrics file into `tsdb`. Raises RuntimeError with promtool's words."""
    _finish(_promtool(openmetrics, tsdb, block_hours), openmetrics)


def backfill_chunked(
    nodes: Sequence[HistoryNode],
    start: float,
    end: float,
    resolution: float,
    tsdb: Path,
    scratch: Path,
    chunk_hours: int = 6,
    progress: Callable[[int, int, int], None] | None = None,
) -> tuple[int, int]:
    """The history of [start, end) at `resolution` s into `tsdb`, in files of `chunk_hours` (one promtool block
    each, read once; `start` should be a multiple of it) written to `scratch` and deleted once backfilled. The
    next file is written while promtool reads the last. Returns (samples, the largest file's bytes); calls
    `progress(chunk, chunks, samples so far)`."""
    span = chunk_hours * 3600.0
    chunks = math.ceil((end - start) / span)
    scratch.mkdir(parents=True, exist_ok=True)
    samples, largest = 0, 0
    running: tuple[subprocess.Popen[bytes], Path] | None = None
    try:
        for chunk in range(chunks):
            begin = start + chunk * span
            times = np.arange(begin, min(begin + span, end), resolution)
            path = scratch / f"chunk-{chunk:04d}.om"
            with path.open("w") as out:
                samples += write_openmetrics(out, nodes, times)
            largest = max(largest, path.stat().st_size)
            if running is not None:
                _finish(*running)
                running[1].unlink()
            running = (_promtool(path, tsdb, chunk_hours), path)
            if progress is not None:
                progress(chunk + 1, chunks, samples)
        if running is not None:
            _finish(*running)
            running[1].unlink()
            running = None
    finally:
        if running is not None:
            running[0].kill()
            running[0].wait()
            running[1].unlink(missing_ok=True)
    return samples, largest


def _config(rule_files: Sequence[Path], evaluation_interval: str | None, scrape: Sequence[str] = ()) -> str:
    """prometheus.yml: the rule files, the evaluation interval and the scrape targets (`host:port`, every second)
    when given (JSON is YAML)."""
    lines = [f"global: {{evaluation_interval: {evaluation_interval}}}" if evaluation_interval else "global: {}"]
    if rule_files:
        lines.append("rule_files:")
        lines += [f"  - {json.dumps(str(Path(path).resolve()))}" for path in rule_files]
    if scrape:
        job = {"job_name": "dcgm", "scrape_interval": "1s", "static_configs": [{"targets": list(scrape)}]}
        lines.append(f"scrape_configs: [{json.dumps(job)}]")
    return "\n".join(lines) + "\n"


class PrometheusServer:
    """`prometheus` on a free loopback port over a TSDB directory, scraping `scrape` targets every second when
    given (a test's exporter), else none; stop() or `with`.

    The retention must reach back to the oldest backfilled sample, or Prometheus deletes those blocks when it
    starts: `retention_days` (10 years by default) is checked against `oldest`. Compaction is kept to the 2 h
    blocks of its own head (`--storage.tsdb.max-block-duration=2h`): backfilled blocks are not merged in the
    background while they are measured.

    `rule_files` are loaded (`rule_files:` in its config), evaluated every `evaluation_interval` (a Prometheus
    duration, `1s`; Prometheus's default, 1m, when None); without either the config is empty, as before.
    """

    def __init__(
        self,
        tsdb: Path,
        oldest: float,
        retention_days: int = 3650,
        max_samples: int = 50_000_000,
        extra: Sequence[str] = (),
        rule_files: Sequence[Path] = (),
        evaluation_interval: str | None = None,
        scrape: Sequence[str] = (),
    ) -> None:
        if oldest < time.time() - retention_days * 86400:
            raise ValueError(f"samples from {oldest:.0f} are older than {retention_days} days of retention")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = Path(tempfile.mkdtemp(prefix="gpupack-prometheus-"))
        config = self._dir / "prometheus.yml"
        config.write_text(_config(rule_files, evaluation_interval, scrape))
        self.log = self._dir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tsdb}",
                    f"--storage.tsdb.retention.time={retention_days}d",
                    "--storage.tsdb.max-block-duration=2h",
                    f"--query.max-samples={max_samples}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until `/-/ready` answers 200 (the TSDB and its blocks are open). Raises RuntimeError with the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except urllib.error.HTTPError as err:  # 503 while starting: close it, or its socket warns at GC
                err.close()
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {timeout:g}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Terminate it (kill after 10 s) and remove its config and log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
