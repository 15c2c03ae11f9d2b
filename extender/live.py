"""Live GPU utilization per node and GPU, from DCGM exporter series, with the age of every sample.

DCGM reports `DCGM_FI_DEV_GPU_UTIL` (0-100) for whole GPUs but not for MIG instances; there each instance
reports `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1) relative to its own slices, so a MIG GPU's utilization is the
instances' activity weighted by their compute slices over the GPU's 7 (dcgm-exporter #216, #430).
The node is read from the label the admin names, else `Hostname` (before 2026) or `hostname` (after #655);
the pod from `exported_pod` (through a ServiceMonitor) or `pod`. Through a ServiceMonitor, `pod` is the scrape
target's, the exporter's own pod: it sits beside `exported_pod` on a used GPU's series and alone on an idle
GPU's, so a `pod` value seen beside an `exported_pod` anywhere in the read is never taken for a workload.

Scores read `LiveMetrics.fresh_utils()`: a GPU whose newest sample is older than the policy's age counts as
unknown, and a node with no fresh GPU is scored neutral and never filtered for lack of data.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
HOST_LABELS = ("Hostname", "hostname")
_COMPUTE_SLICES = re.compile(r"^(\d+)g\.")


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
    mig_activity: dict[str, tuple[float, int]] = field(default_factory=dict)
    """MIG instance id -> (activity 0-1, compute slices)."""


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


def node_of(labels: Mapping[str, str], node_label: str | None) -> str | None:
    """The node a series belongs to."""
    for key in (node_label,) if node_label else HOST_LABELS:
        value = labels.get(key)
        if value:
            return value
    return None


def exporter_pods(labels: Iterable[Mapping[str, str]]) -> set[str]:
    """The exporter's own pods among these series: a `pod` seen beside an `exported_pod` is a ServiceMonitor
    target's (the exporter DaemonSet pod), never a workload, on that series and on every other one."""
    return {each["pod"] for each in labels if each.get("exported_pod") and "pod" in each}


def workload(labels: Mapping[str, str], exporters: Set[str]) -> tuple[str, str] | None:
    """`(namespace, pod)` of the workload a series maps its GPU to: `exported_pod` (through a ServiceMonitor)
    else `pod`, with the namespace beside it; None without a pod or when the pod is one of `exporters`."""
    if labels.get("exported_pod"):
        pod, namespace = labels["exported_pod"], labels.get("exported_namespace", "")
    else:
        pod, namespace = labels.get("pod", ""), labels.get("namespace", "")
    if not pod or pod in exporters:
        return None
    return namespace, pod


def _slices(profile: str) -> int:
    match = _COMPUTE_SLICES.match(profile)
    return int(match.group(1)) if match else 1


def aggregate(series: Iterable[Series], node_label: str | None, read_at: float) -> LiveMetrics:
    """Fold DCGM series into per-node, per-GPU state. Series without a node or GPU label are skipped."""
    series = list(series)
    exporters = exporter_pods(s.labels for s in series)
    nodes: dict[str, dict[str, GpuLive]] = {}
    for s in series:
        node = node_of(s.labels, node_label)
        gpu_index = s.labels.get("gpu")
        if node is None or gpu_index is None:
            continue
        gpu = nodes.setdefault(node, {}).setdefault(gpu_index, GpuLive())
        gpu.at = max(gpu.at, s.at)
        used_by = workload(s.labels, exporters)
        if used_by is not None:
            gpu.pods.add(used_by[1])
        instance = s.labels.get("GPU_I_ID", "")
        if s.signal == GPU_UTIL and not instance:
            gpu.util = min(max(s.value / 100.0, 0.0), 1.0)
        elif s.signal == GR_ENGINE_ACTIVE and instance:
            gpu.mig_activity[instance] = (min(max(s.value, 0.0), 1.0), _slices(s.labels.get("GPU_I_PROFILE", "")))
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
                gpu.util = min(sum(a * n for a, n in gpu.mig_activity.values()) / 7.0, 1.0)
            newest = gpu.at if newest is None else max(newest, gpu.at)
        valued = [g for g in gpus.values() if g.util is not None]
        if valued:
            summary[name] = NodeUtils(tuple(g.util for g in valued if g.util is not None), min(g.at for g in valued))
    return LiveMetrics(nodes, read_at, summary, newest, next(_SERIALS))
