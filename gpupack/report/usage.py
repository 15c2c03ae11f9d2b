"""What the GPUs did over a window: the one shape every source (Prometheus, nvidia-smi CSV files) reduces to, and
every finding reads. No source is queried past this point.

Units: utilization and engine activity in percent (0-100), memory in MiB, times in seconds since the epoch. A
value is None when the source had nothing for it (DCGM reports no `GPU_UTIL` for MIG instances; nvidia-smi no
engine activity), never a made-up zero.

Which number classifies a GPU is a setting (`UtilizationMetric`): `gpu-util` (the guide's (docs/method.md)
`DCGM_FI_DEV_GPU_UTIL`, the default) or `engine-active` (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`). GPU_UTIL counts the
time any kernel runs, so it overstates use (a real T4 read 91 % GPU_UTIL at 0.156 engine activity); where a
GPU has no GPU_UTIL (MIG) its engine activity stands in, whatever the setting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpupack.core.dcgm import busy_fraction
from gpupack.core.gpus.catalog import mig_model_of

UtilizationMetric = Literal["gpu-util", "engine-active"]


@dataclass(frozen=True, slots=True)
class Window:
    """A stretch of time, [start, end) in seconds since the epoch."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end <= self.start:
            raise ValueError(f"a window must end after it starts ({self.start:g}..{self.end:g})")

    @property
    def seconds(self) -> float:
        """Its length in seconds."""
        return self.end - self.start

    @property
    def hours(self) -> float:
        """Its length in hours."""
        return self.seconds / 3600.0


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One physical GPU over the window, or one MIG instance of it (`instance` set).

    `held_idle` is the fraction of the window's samples in which the framebuffer was mostly used (at least half)
    while compute was mostly idle (under 10 %): the guide's "memory held, compute idle" signal, computed where the
    samples are (in PromQL, or over the CSV rows).
    """

    node: str
    gpu: str
    """The GPU's index on its node, as DCGM's `gpu` label and nvidia-smi's `index` write it ("0", "1", ...)."""
    model: str | None = None
    """`modelName` / nvidia-smi `name`, e.g. `NVIDIA A100-SXM4-40GB`."""
    instance: str | None = None
    """MIG instance id (`GPU_I_ID`); None for a whole GPU."""
    profile: str | None = None
    """MIG profile (`GPU_I_PROFILE`, e.g. `3g.40gb`); None for a whole GPU."""
    util_mean: float | None = None
    """`DCGM_FI_DEV_GPU_UTIL` / nvidia-smi `utilization.gpu`, mean over the window, percent."""
    util_p95: float | None = None
    """Its 95th percentile over the window, percent."""
    engine_mean: float | None = None
    """`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, mean over the window, percent."""
    fb_used_mean: float | None = None
    """Framebuffer used, mean, MiB."""
    fb_used_max: float | None = None
    """Framebuffer used, the most in any sample, MiB (a MIG instance near its profile's memory)."""
    fb_total: float | None = None
    """Framebuffer size, MiB (used + free, or nvidia-smi's `memory.total`)."""
    held_idle: float | None = None
    """Fraction (0-1) of the window with the framebuffer mostly used and compute mostly idle."""
    pods: frozenset[str] = frozenset()
    """`namespace/name` of the pods the exporter mapped to this GPU during the window."""
    hours: float | None = None
    """Hours of the window the GPU was there (it had samples): less than the window when its node came or went
    (the autoscaler). None when the source cannot tell: the whole window is assumed."""

    def present_hours(self, window: Window) -> float:
        """Hours the GPU was there, at most the window's."""
        return window.hours if self.hours is None else min(self.hours, window.hours)

    def utilization(self, metric: UtilizationMetric = "gpu-util") -> float | None:
        """The percent that classifies this GPU under `metric`; engine activity where there is no GPU_UTIL."""
        if metric == "engine-active":
            return self.engine_mean if self.engine_mean is not None else self.util_mean
        return self.util_mean if self.util_mean is not None else self.engine_mean

    @property
    def fb_used_fraction(self) -> float | None:
        """Mean framebuffer use over its size, 0-1."""
        if self.fb_used_mean is None or not self.fb_total:
            return None
        return min(self.fb_used_mean / self.fb_total, 1.0)


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One node's GPUs over the window."""

    node: str
    model: str | None
    gpus: int
    """Physical GPUs seen (a MIG GPU counts once)."""
    util_mean: float | None
    """Mean over its GPUs of their utilization under the chosen metric, percent (a MIG GPU: its instances'
    activity weighted by compute slices over 7, as the extender reads it)."""
    util_p95: float | None
    """The highest of its GPUs' 95th percentiles, percent (what a hot GPU on the node reaches)."""
    fb_used_fraction: float | None
    """Framebuffer used over framebuffer size, summed over its GPUs, 0-1."""
    hourly: tuple[float | None, ...] = ()
    """Mean utilization per hour of the window, percent (the heatmap's row); None for an hour without data."""
    gpu_hours: float | None = None
    """GPU-hours the node was there: its GPUs' hours summed (a node the autoscaler added or removed mid-window
    counts its time); None when the source cannot tell, then every GPU counts the whole window."""

    def idle_gpu_hours(self, window_hours: float) -> float | None:
        """GPU-hours of its capacity not used: GPU-hours x (1 - utilization); None when utilization is unknown."""
        if self.util_mean is None:
            return None
        hours = self.gpus * window_hours if self.gpu_hours is None else self.gpu_hours
        return hours * max(0.0, 1.0 - self.util_mean / 100.0)


@dataclass(frozen=True, slots=True)
class Usage:
    """Everything a source says about the window."""

    window: Window
    source: str
    """Where it came from, for people: `Prometheus http://...`, `nvidia-smi files (3)`."""
    gpus: tuple[GpuUsage, ...]
    hourly: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    """Per node, the mean utilization of each hour of the window, percent."""
    samples: int = 0
    """Samples (numbers) the source pulled to build this: what aggregating at the source saves."""
    metric: UtilizationMetric = "gpu-util"

    def physical(self) -> list[GpuUsage]:
        """Whole GPUs, one per (node, gpu): MIG instances folded into their GPU (see `fold_mig`)."""
        return fold_mig(self.gpus)

    def nodes(self) -> dict[str, NodeUsage]:
        """Per node, its GPUs summed up; sorted by node name."""
        by_node: dict[str, list[GpuUsage]] = {}
        for gpu in self.physical():
            by_node.setdefault(gpu.node, []).append(gpu)
        return {
            name: node_usage(
                name,
                gpus,
                self.metric,
                self.hourly.get(name, ()),
                sum(g.present_hours(self.window) for g in gpus) if all(g.hours is not None for g in gpus) else None,
            )
            for name, gpus in sorted(by_node.items())
        }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def fold_mig(gpus: Sequence[GpuUsage]) -> list[GpuUsage]:
    """Whole GPUs as they are; the MIG instances of one GPU folded into one: activity folded by
    `gpupack.core.dcgm.busy_fraction` (idle slices count as idle; an A30's instances are shares of its 4 compute
    slices, the others' of 7), memory summed, pods united. Instances stay in `Usage.gpus` for
    the findings that are about one instance (`mig-near-oom`)."""
    whole: dict[tuple[str, str], GpuUsage] = {}
    instances: dict[tuple[str, str], list[GpuUsage]] = {}
    for gpu in gpus:
        key = (gpu.node, gpu.gpu)
        if gpu.instance is None:
            whole[key] = gpu
        else:
            instances.setdefault(key, []).append(gpu)
    for key, parts in instances.items():
        if key in whole:  # a GPU reported whole as well (MIG mode changed in the window): keep the whole one
            continue
        engine = [p.engine_mean for p in parts]
        model = mig_model_of(next((p.model for p in parts if p.model), ""))
        activities = [((e or 0.0) / 100.0, p.profile or "") for p, e in zip(parts, engine, strict=True)]
        weighted = 100.0 * busy_fraction(activities, model) if any(e is not None for e in engine) else None
        used = [p.fb_used_mean for p in parts if p.fb_used_mean is not None]
        total = [p.fb_total for p in parts if p.fb_total is not None]
        whole[key] = GpuUsage(
            node=key[0],
            gpu=key[1],
            model=next((p.model for p in parts if p.model), None),
            engine_mean=None if weighted is None else min(weighted, 100.0),
            fb_used_mean=sum(used) if used else None,
            fb_total=sum(total) if total else None,
            held_idle=_mean(p.held_idle for p in parts),
            pods=frozenset().union(*(p.pods for p in parts)),
            hours=max((p.hours for p in parts if p.hours is not None), default=None),
        )
    return [whole[key] for key in sorted(whole, key=lambda k: (k[0], _index(k[1])))]


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isdigit() else (1 << 30, gpu)


def node_usage(
    node: str,
    gpus: Sequence[GpuUsage],
    metric: UtilizationMetric,
    hourly: tuple[float | None, ...] = (),
    gpu_hours: float | None = None,
) -> NodeUsage:
    """A node's numbers from its physical GPUs."""
    used = [g.fb_used_mean for g in gpus if g.fb_used_mean is not None and g.fb_total]
    total = [g.fb_total for g in gpus if g.fb_used_mean is not None and g.fb_total]
    p95 = [g.util_p95 for g in gpus if g.util_p95 is not None]
    return NodeUsage(
        node=node,
        model=next((g.model for g in gpus if g.model), None),
        gpus=len(gpus),
        util_mean=_mean(g.utilization(metric) for g in gpus),
        util_p95=max(p95) if p95 else None,
        fb_used_fraction=(sum(used) / sum(total)) if total and sum(total) else None,
        hourly=hourly,
        gpu_hours=gpu_hours,
    )
