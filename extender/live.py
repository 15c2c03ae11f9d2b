"""Live GPU utilization per node and GPU, from DCGM exporter series, with the age of every sample.

DCGM reports `DCGM_FI_DEV_GPU_UTIL` (0-100) for whole GPUs but not for MIG instances; there each instance
reports `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1) relative to its own slices, so a MIG GPU's utilization is
`gpupack.core.dcgm.busy_fraction` of its instances: an A30's instances are shares of 4 compute slices, the
others' of 7. The node, the pod and the exporter's own pods are read as `gpupack.core.dcgm` says (the label the
admin names, else `Hostname` or `hostname`; `exported_pod` else `pod`, never the exporter's own).

Scores read `LiveMetrics.fresh_utils()`: a GPU whose newest sample is older than the policy's age counts as
unknown, and a node with no fresh GPU is scored neutral and never filtered for lack of data.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpupack.core.dcgm import (
    FB_FREE,
    FB_USED,
    GPU,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    INSTANCE,
    MODEL,
    PROFILE,
    busy_fraction,
    exporter_pods,
    node_of,
    workload,
)
from gpupack.core.gpus.catalog import mig_model_of


@dataclass(frozen=True, slots=True)
class Series:
    """One sample of one DCGM series: which signal, its labels, its value and when it was taken (epoch s)."""

    signal: str
    labels: Mapping[str, str]
    value: float
    at: float


@dataclass(slots=True)
class GpuLive:
    """What is known of one physical GPU: utilization 0-1, memory (MiB), pods on it, newest sample time."""

    util: float | None = None
    fb_used: float | None = None
    fb_free: float | None = None
    pods: set[str] = field(default_factory=set)
    at: float = 0.0
    mig_activity: dict[str, tuple[float, str]] = field(default_factory=dict)
    """MIG instance id -> (activity 0-1, profile)."""
    model: str | None = None
    """The GPU's catalog model, from DCGM's `modelName` (it decides a MIG instance's share of the GPU)."""


@dataclass(frozen=True, slots=True)
class NodeUtils:
    """A node's GPU utilizations with a value, and the oldest sample among them: the verbs' fast path."""

    utils: tuple[float, ...]
    oldest: float


@dataclass(frozen=True, slots=True)
class LiveMetrics:
    """A snapshot of every node's GPUs, built in the background and only read by the verbs."""

    nodes: Mapping[str, Mapping[str, GpuLive]]
    read_at: float
    """When the source was last read successfully (0: never)."""
    summary: Mapping[str, NodeUtils] = field(default_factory=dict)
    newest_at: float | None = None
    """Time of the newest sample of any GPU (None when there is none)."""
    serial: int = 0
    """Distinct for every snapshot built: cached decisions made on another snapshot are void."""

    def fresh_utils(self, node: str, now: float, max_age: float) -> tuple[float, ...]:
        """Utilizations (0-1) of the node's GPUs whose data is at most `max_age` seconds old."""
        summary = self.summary.get(node)
        if summary is None:
            return ()
        if now - summary.oldest <= max_age:  # all fresh: the usual case, no walk over the GPUs
            return summary.utils
        return tuple(g.util for g in self.nodes[node].values() if g.util is not None and now - g.at <= max_age)

    def fresh_until(self, node: str, now: float, max_age: float) -> float:
        """When `fresh_utils(node)` next changes as samples age (infinity when it cannot)."""
        summary = self.summary.get(node)
        if summary is None:
            return float("inf")
        if now - summary.oldest <= max_age:
            return summary.oldest + max_age
        ages = [g.at + max_age for g in self.nodes[node].values() if g.util is not None and now - g.at <= max_age]
        return min(ages, default=float("inf"))

    def newest(self) -> float | None:
        """Time of the newest sample of any GPU (None when there is none)."""
        return self.newest_at


EMPTY = LiveMetrics({}, 0.0)
_SERIALS = itertools.count(1)


def aggregate(
    series: Iterable[Series], node_label: str | None, read_at: float, by_uuid: Mapping[str, str] | None = None
) -> LiveMetrics:
    """Fold DCGM series into per-node, per-GPU state. Series without a node or GPU label are skipped; a series of
    a GPU a DRA driver publishes is its node's by UUID (`by_uuid`, `dcgm.node_of`)."""
    series = list(series)
    exporters = exporter_pods(s.labels for s in series)
    nodes: dict[str, dict[str, GpuLive]] = {}
    for s in series:
        node = node_of(s.labels, node_label, by_uuid)
        gpu_index = s.labels.get(GPU)
        if node is None or gpu_index is None:
            continue
        gpu = nodes.setdefault(node, {}).setdefault(gpu_index, GpuLive())
        gpu.at = max(gpu.at, s.at)
        used_by = workload(s.labels, exporters)
        if used_by is not None:
            gpu.pods.add(used_by[1])
        instance = s.labels.get(INSTANCE, "")
        if gpu.model is None and s.labels.get(MODEL):
            gpu.model = mig_model_of(s.labels[MODEL])
        if s.signal == GPU_UTIL and not instance:
            gpu.util = min(max(s.value / 100.0, 0.0), 1.0)
        elif s.signal == GR_ENGINE_ACTIVE and instance:
            gpu.mig_activity[instance] = (min(max(s.value, 0.0), 1.0), s.labels.get(PROFILE, ""))
        elif s.signal == GR_ENGINE_ACTIVE and gpu.util is None:
            gpu.util = min(max(s.value, 0.0), 1.0)
        elif s.signal == FB_USED:
            gpu.fb_used = (gpu.fb_used or 0.0) + s.value
        elif s.signal == FB_FREE:
            gpu.fb_free = (gpu.fb_free or 0.0) + s.value
    summary: dict[str, NodeUtils] = {}
    newest: float | None = None
    for name, gpus in nodes.items():
        for gpu in gpus.values():
            if gpu.mig_activity:
                gpu.util = busy_fraction(gpu.mig_activity.values(), gpu.model)
            newest = gpu.at if newest is None else max(newest, gpu.at)
        valued = [g for g in gpus.values() if g.util is not None]
        if valued:
            summary[name] = NodeUtils(tuple(g.util for g in valued if g.util is not None), min(g.at for g in valued))
    return LiveMetrics(nodes, read_at, summary, newest, next(_SERIALS))
