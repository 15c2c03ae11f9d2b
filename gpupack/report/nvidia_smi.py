"""Usage from nvidia-smi CSV logs, for clusters without DCGM: what the guide's (docs/method.md) own command writes on
each node.

    nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv -l 5 > NODE.csv

The first line names the fields with their units (`index, name, utilization.gpu [%], memory.used [MiB],
memory.total [MiB]`), each row holds one GPU's sample (`0, NVIDIA A100-SXM4-40GB, 12 %, 30510 MiB, 40960 MiB`),
and fields nvidia-smi cannot read are `[N/A]` (or `[Not Supported]`). The header may come again (a restarted
log appended to the same file); fields may come in any order; `timestamp` (nvidia-smi writes the node's local
time, `2026/11/30 10:00:00.123`: read as UTC, so log on nodes that run in UTC) dates each row, and without it the
rows of one GPU are taken 5 s apart (the command's `-l 5`), the last one at the file's end time. A log cut short by
the node going down ends mid-line: that last line is dropped. Any other line that does not read is an error naming
the file and the line.

Only what nvidia-smi has is filled: utilization and memory. No engine activity, no pods, no MIG instances.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpupack.core.thresholds import Thresholds
from gpupack.report.sources import Progress
from gpupack.report.usage import GpuUsage, Usage, UtilizationMetric, Window

INTERVAL_SECONDS = 5.0
"""The guide's `-l 5`: the spacing of rows without a timestamp."""
MAX_FILE_BYTES = 2 * 1024**3
"""The largest log read (a week of 8 GPUs at 5 s is about 60 MB): beyond that it is not one node's log."""
MISSING = ("[N/A]", "[Not Supported]", "N/A", "")
FIELDS = {"index", "name", "utilization.gpu", "memory.used", "memory.total", "timestamp"}
REQUIRED = ("index", "utilization.gpu")


class CsvError(ValueError):
    """A log that cannot be read; the message names the file and the line."""


@dataclass(slots=True)
class _Gpu:
    """The samples of one GPU of one node: (time, utilization %, memory used MiB, memory total MiB)."""

    name: str | None = None
    samples: list[tuple[float, float | None, float | None, float | None]] = field(default_factory=list)


def _number(text: str, unit: str, where: str) -> float | None:
    """A field's value without its unit (`12 %`, `30510 MiB`); None for `[N/A]`."""
    value = text.strip()
    if value in MISSING:
        return None
    if unit and value.endswith(unit):
        value = value[: -len(unit)].strip()
    try:
        number = float(value)
    except ValueError as exc:
        raise CsvError(f"{where}: {text.strip()!r} is not a number{f' in {unit}' if unit else ''}") from exc
    if not math.isfinite(number) or number < 0:
        raise CsvError(f"{where}: {text.strip()!r} is not a count or a percentage")
    return number


def _timestamp(text: str, where: str) -> float:
    value = text.strip()
    for pattern in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(value, pattern).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise CsvError(f"{where}: {value!r} is not a timestamp like 2026/11/30 10:00:00.123")


def _columns(header: Sequence[str], where: str) -> dict[str, tuple[int, str]]:
    """Field name -> (column, unit) from a header line (`utilization.gpu [%]`)."""
    columns: dict[str, tuple[int, str]] = {}
    for number, cell in enumerate(header):
        name, _, unit = cell.strip().partition(" [")
        if name in FIELDS:
            columns[name] = (number, unit.rstrip("]").strip())
    missing = [f for f in REQUIRED if f not in columns]
    if missing:
        raise CsvError(f"{where}: the header has no {', '.join(missing)} (query at least index,utilization.gpu)")
    return columns


def read_log(text: str, source: str, end: float) -> dict[str, _Gpu]:
    """The samples of one node's log, per GPU index. `end` dates the last row of a log without timestamps.

    Raises CsvError naming `source` and the line for anything but a last line cut short.
    """
    lines = text.split("\n")
    cut = not text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    if not rows:
        raise CsvError(f"{source}: empty: no nvidia-smi CSV header")
    header_line = lines[0]
    columns = _columns(rows[0], f"{source}:1")
    gpus: dict[str, _Gpu] = {}
    untimed: list[tuple[str, float | None, float | None, float | None]] = []
    for number, (line, row) in enumerate(zip(lines[1:], rows[1:], strict=False), start=2):
        if not line.strip() or line.strip() == header_line.strip():
            continue
        where = f"{source}:{number}"
        if len(row) != len(rows[0]):
            if cut and number == len(lines):  # the log ends mid-line: the node went down while writing
                break
            raise CsvError(f"{where}: {len(row)} fields where the header has {len(rows[0])}: {line[:120]!r}")
        index = row[columns["index"][0]].strip()
        if not index.isdigit():
            raise CsvError(f"{where}: GPU index {index!r} is not a number")
        util = _number(row[columns["utilization.gpu"][0]], columns["utilization.gpu"][1] or "%", where)
        used = _number(row[columns["memory.used"][0]], "MiB", where) if "memory.used" in columns else None
        total = _number(row[columns["memory.total"][0]], "MiB", where) if "memory.total" in columns else None
        gpu = gpus.setdefault(index, _Gpu())
        if "name" in columns:
            gpu.name = row[columns["name"][0]].strip() or gpu.name
        if "timestamp" in columns:
            gpu.samples.append((_timestamp(row[columns["timestamp"][0]], where), util, used, total))
        else:
            untimed.append((index, util, used, total))
    if untimed:
        per_gpu: dict[str, int] = {}
        for index, *_ in untimed:
            per_gpu[index] = per_gpu.get(index, 0) + 1
        seen: dict[str, int] = {}
        for index, util, used, total in untimed:
            seen[index] = seen.get(index, 0) + 1
            at = end - (per_gpu[index] - seen[index]) * INTERVAL_SECONDS
            gpus[index].samples.append((at, util, used, total))
    return gpus


def node_file(argument: str) -> tuple[str, Path]:
    """`NODE=FILE`, or a file named for its node (`gpu-node-1.csv`): (node, path)."""
    node, sep, path = argument.partition("=")
    if sep and node and path:
        return node, Path(path)
    file = Path(argument)
    return file.stem, file


def _spacing(times: Sequence[float]) -> float:
    """The usual time between samples (the median step), INTERVAL_SECONDS when there is no step."""
    steps = sorted(b - a for a, b in itertools.pairwise(sorted(times)) if b > a)
    return steps[len(steps) // 2] if steps else INTERVAL_SECONDS


def _span(gpu: _Gpu) -> tuple[float, float]:
    times = [s[0] for s in gpu.samples]
    return min(times), max(times) + _spacing(times)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def summarize(node: str, index: str, gpu: _Gpu, window: Window, thresholds: Thresholds) -> GpuUsage | None:
    """One GPU's usage over the window from its samples; None when it has none in the window."""
    inside = [s for s in gpu.samples if window.start <= s[0] < window.end]
    if not inside:
        return None
    utils = [u for _, u, _, _ in inside if u is not None]
    used = [m for _, _, m, _ in inside if m is not None]
    totals = [t for _, _, _, t in inside if t]
    held = [
        (m / t >= thresholds.held_memory and u < thresholds.held_compute)
        for _, u, m, t in inside
        if u is not None and m is not None and t
    ]
    times = [at for at, _, _, _ in inside]
    spacing = _spacing(times)
    return GpuUsage(
        node=node,
        gpu=index,
        model=gpu.name,
        hours=min(len(times) * spacing, window.seconds) / 3600.0,
        util_mean=sum(utils) / len(utils) if utils else None,
        util_p95=_p95(utils) if utils else None,
        fb_used_mean=sum(used) / len(used) if used else None,
        fb_used_max=max(used) if used else None,
        fb_total=max(totals) if totals else None,
        held_idle=sum(held) / len(held) if held else None,
    )


def hourly(node_gpus: Mapping[str, _Gpu], window: Window) -> tuple[float | None, ...]:
    """The node's mean utilization per hour of the window (all its GPUs' samples of that hour)."""
    hours = max(1, math.ceil(window.hours))
    sums, counts = [0.0] * hours, [0] * hours
    for gpu in node_gpus.values():
        for at, util, _, _ in gpu.samples:
            if util is None or not window.start <= at < window.end:
                continue
            slot = min(int((at - window.start) // 3600), hours - 1)
            sums[slot] += util
            counts[slot] += 1
    return tuple(s / c if c else None for s, c in zip(sums, counts, strict=True))


class NvidiaSmiLogs:
    """`UsageSource` over nvidia-smi CSV logs, one per node."""

    def __init__(self, files: Iterable[str]) -> None:
        """`files`: `NODE=FILE` or files named for their nodes. Nothing is read yet."""
        self.files = [node_file(f) for f in files]
        names = [node for node, _ in self.files]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise CsvError(f"more than one log for node {', '.join(twice)}: name them NODE=FILE")
        self._read: dict[str, dict[str, _Gpu]] | None = None

    def _logs(self, progress: Progress | None) -> dict[str, dict[str, _Gpu]]:
        if self._read is None:
            logs: dict[str, dict[str, _Gpu]] = {}
            for done, (node, path) in enumerate(self.files):
                if progress is not None:
                    progress(f"reading {path.name}", done, len(self.files))
                size = os.stat(path).st_size
                if size > MAX_FILE_BYTES:
                    raise CsvError(f"{path}: {size} bytes is more than one node's log ({MAX_FILE_BYTES})")
                try:
                    text = path.read_text(encoding="utf-8")
                except UnicodeDecodeError as exc:
                    raise CsvError(f"{path}: not a text file: {exc}") from exc
                logs[node] = read_log(text, str(path), os.stat(path).st_mtime)
            self._read = logs
        return self._read

    def covered(self, progress: Progress | None = None) -> Window:
        """The window the logs cover: from the first sample to one sample spacing after the last (the last
        sample stands for the interval it starts). Raises CsvError when the logs hold no sample."""
        spans = [_span(g) for gpus in self._logs(progress).values() for g in gpus.values() if g.samples]
        if not spans:
            raise CsvError("the nvidia-smi logs hold no sample")
        return Window(min(s for s, _ in spans), max(e for _, e in spans))

    def usage(
        self, window: Window, metric: UtilizationMetric, thresholds: Thresholds, progress: Progress | None = None
    ) -> Usage:
        """Every GPU of every log over `window`."""
        logs = self._logs(progress)
        gpus = [
            usage
            for node, node_gpus in sorted(logs.items())
            for index, gpu in sorted(node_gpus.items(), key=lambda kv: int(kv[0]))
            if (usage := summarize(node, index, gpu, window, thresholds)) is not None
        ]
        samples = sum(len(g.samples) for node_gpus in logs.values() for g in node_gpus.values())
        return Usage(
            window=window,
            source=f"nvidia-smi logs ({len(self.files)} node{'s' if len(self.files) != 1 else ''})",
            gpus=tuple(gpus),
            hourly={node: hourly(node_gpus, window) for node, node_gpus in sorted(logs.items())},
            samples=samples,
            metric=metric,
        )
