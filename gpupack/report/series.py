"""From per-series numbers to GPUs: the Prometheus source's answers (one number per DCGM series and statistic)
folded into one `GpuUsage` per GPU or MIG instance, and its per-node hourly rows into the heatmap. Pure.

A GPU's series are those with its node, index and MIG instance (a new pod on it starts a new series, an exporter
upgraded past dcgm-exporter #655 renames its host label). Means are weighted by each series' samples; maxima are
the highest; a 95th percentile is the highest of its series', an upper bound of the GPU's own (a set's 95th
percentile is never above the highest of its parts'). A series whose number is not finite (it holds a NaN
sample) is left out of that statistic. Pods are read as `gpupack.core.dcgm` says: `exported_pod` else `pod`,
never the exporter's own pod.

The series are kept once each, as the few labels the report reads (`Catalog`): a week of 500 nodes is 20,000
series answered by seven queries, and their label sets as parsed JSON would take ~300 MB.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupack.core import dcgm
from gpupack.core.dcgm import exporter_pods, node_of, workload
from gpupack.report.usage import GpuUsage

Labels = Mapping[str, str]
Key = tuple[str, str, str | None, str | None]
"""(node, gpu, MIG instance, MIG profile)."""
Row = tuple[Labels, float | None]
"""A series' labels and its number (None unless finite)."""
Stat = Mapping[int, float | None]
"""Series id -> its number for one statistic."""


def key_of(labels: Labels, node_label: str | None) -> Key | None:
    """The GPU or MIG instance a series is about; None without a node or a GPU index."""
    node = node_of(labels, node_label)
    gpu = labels.get(dcgm.GPU)
    if not node or gpu is None:
        return None
    return node, gpu, labels.get(dcgm.INSTANCE) or None, labels.get(dcgm.PROFILE) or None


@dataclass(frozen=True, slots=True)
class SeriesInfo:
    """What the report reads of a series."""

    key: Key | None
    model: str | None
    pod_labels: Mapping[str, str]


class Catalog:
    """The series the per-series queries answered about, each kept once, numbered. Safe to add to from threads."""

    def __init__(self, node_label: str | None) -> None:
        self.node_label = node_label
        self.series: list[SeriesInfo] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, rows: Iterable[Row]) -> dict[int, float | None]:
        """The rows' numbers by series id (statistics drop the metric name: the same series across queries)."""
        out: dict[int, float | None] = {}
        for labels, value in rows:
            identity = "\0".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
            with self._lock:
                number = self._ids.get(identity)
                if number is None:
                    number = self._ids[identity] = len(self.series)
                    pods = {k: labels[k] for k in dcgm.POD_LABELS if k in labels}
                    self.series.append(SeriesInfo(key_of(labels, self.node_label), labels.get(dcgm.MODEL), pods))
            out[number] = value
        return out


def _weighted(ids: Sequence[int], values: Stat, weights: Stat) -> float | None:
    """The mean of the series' finite values weighted by their samples (1 for a series without a count)."""
    known = [(v, weights.get(i) or 1.0) for i in ids if (v := values.get(i)) is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if known and total else None


def _top(ids: Sequence[int], values: Stat) -> float | None:
    known = [v for i in ids if (v := values.get(i)) is not None]
    return max(known) if known else None


def gpus(catalog: Catalog, stats: Mapping[str, Stat]) -> list[GpuUsage]:
    """One `GpuUsage` per GPU and MIG instance, sorted by node, index and instance. `stats` holds per-series
    `util`, `engine` (0-1), `used`, `used_max`, `free`, `count` (samples), `p95` and `held` (a fraction; a
    series with a count but no held number held none of its points)."""
    exporters = exporter_pods(info.pod_labels for info in catalog.series)
    by_key: dict[Key, list[int]] = {}
    for number, info in enumerate(catalog.series):
        if info.key is not None:
            by_key.setdefault(info.key, []).append(number)

    def stat(name: str) -> Stat:
        return stats.get(name, {})

    weights, used, free, held = stat("count"), stat("used"), stat("free"), stat("held")
    out = []
    for key in sorted(by_key, key=_order):
        ids = by_key[key]
        infos = [catalog.series[i] for i in ids]
        pods = {f"{w[0]}/{w[1]}" if w[0] else w[1] for info in infos if (w := workload(info.pod_labels, exporters))}
        totals = {i: u + f for i in ids if (u := used.get(i)) is not None and (f := free.get(i)) is not None}
        counted = [i for i in ids if weights.get(i)]
        engine = _weighted(ids, stat("engine"), weights)
        out.append(
            GpuUsage(
                node=key[0],
                gpu=key[1],
                instance=key[2],
                profile=key[3],
                model=next((info.model for info in infos if info.model), None),
                util_mean=_weighted(ids, stat("util"), weights),
                util_p95=_top(ids, stat("p95")),
                engine_mean=None if engine is None else engine * 100.0,
                fb_used_mean=_weighted(ids, used, weights),
                fb_used_max=_top(ids, stat("used_max")),
                fb_total=_top(ids, totals),
                held_idle=_weighted(counted, {i: held.get(i) or 0.0 for i in counted}, weights) if counted else None,
                pods=frozenset(pods),
            )
        )
    return out


def _index(text: str | None) -> tuple[int, str]:
    return (int(text), text) if text and text.isdigit() else (-1 if text is None else 1 << 30, text or "")


def _order(key: Key) -> tuple[str, tuple[int, str], tuple[int, str]]:
    """Node, then GPU index, then MIG instance id, as numbers."""
    return key[0], _index(key[1]), _index(key[2])


def hourly(
    rows: Iterable[tuple[Labels, Sequence[tuple[float, float | None]]]],
    node_label: str | None,
    first: float,
    hours: int,
) -> dict[str, tuple[float | None, ...]]:
    """Per node, its hours' means from a range query whose point at `first + i * 3600` ends hour `i`. Rows of
    one node under both host labels (its exporter switched in the window) are averaged hour by hour."""
    sums: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for labels, points in rows:
        node = node_of(labels, node_label)
        if not node:
            continue
        total, count = sums.setdefault(node, [0.0] * hours), counts.setdefault(node, [0] * hours)
        for at, value in points:
            slot = round((at - first) / 3600.0)
            if 0 <= slot < hours and value is not None:
                total[slot] += value
                count[slot] += 1
    return {
        node: tuple(t / c if c else None for t, c in zip(sums[node], counts[node], strict=True))
        for node in sorted(sums)
    }
