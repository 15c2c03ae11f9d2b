"""Eight days of a small GPU cluster, relative to now, in a real Prometheus with gpupack's rules loaded and backfilled.

`PLANTED` describes the world: nine nodes, their GPUs' DCGM signals, the pods kube-state-metrics reports, and the
webhook's and the extender's own metrics. `write_history(out, now)` writes it as OpenMetrics with timestamps, from 8
days before `now` to `now` rounded down to the minute. `monitoring_prometheus(tmp_dir, rule_files)` backfills it
with promtool, starts Debian's `prometheus` over it (no scrape target), backfills the recording rules of
`rule_files` over the 8 days with `promtool tsdb create-blocks-from rules`, restarts Prometheus with the rule files
loaded and evaluated every second, and yields its URL once every rule has been evaluated.

Every value is a step function of the time before now (`Signal`), so a test reads what it expects from `PLANTED`:
`PLANTED.node("hot-1").utilization()` is 95, `.utilization(ago=H)` 50; `PLANTED.alerts_active` names the alerts
whose expressions hold at now, `PLANTED.alerts_silent` those that must not.

The world as the exporters write it:
- DCGM exporter (`gpupack.testing.history`, `gpupack.testing.dcgm.series_labels`): `gpu, UUID, pci_bus_id, device,
  modelName`, the host label (`Hostname`, `hostname` on mig-1), MIG instances' `GPU_I_PROFILE, GPU_I_ID`,
  `namespace, pod, container` of the pod the GPU is mapped to; scraped directly (`job, instance` added).
- kube-state-metrics 2.x: resource names sanitized (`nvidia.com/mig-3g.40gb` is `nvidia_com_mig_3g_40gb`), units
  `core`, `byte`, `integer`; empty labels dropped (a pending pod's `node`); `kube_node_labels` carries
  `label_node_type` and `label_karpenter_sh_capacity_type` as with `--metric-labels-allowlist=nodes=[...]`
  (`gpupack.monitoring.dashboards.ksm_allowlist`), on the spot node only.
- gpupack: what `webhook/metrics.py`, `extender/metrics.py`, `gpupack/telemetry.py` and `gpupack/server.py` export,
  with a ServiceMonitor's target labels (`job` is the Service's name). prometheus-client writes a labelled child
  only once it is used (no `outcome="error"` series when there were no errors) and an unlabelled gauge from the
  start: the extender serves its verbs without TLS (manifests/extender), so its certificate expiry is 0.

Deliberate simplifications, so that each alert is judged on its own series:
- The webhook's `up` is 0 for the last 10 minutes, but its own series go on (a down target's series really go
  stale): its errors, latency and certificate stay readable at now. The promtool unit tests cover a vanished
  target.
- Resolution: 5 min up to 6 h before now, 1 min after (fine enough for `rate()` over 4 m and for the lookback of
  5 m: Prometheus 2.x includes a sample exactly 5 m old); a full 8 days at 1 min would be 4 times the samples.

Prometheus forgets a series 5 minutes after its last sample: the world is current at now and for about 4 minutes
after it, so build it per test module, and query at the `now` the fixture was given.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import yaml

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE
from gpupack.extender.metrics import LATENCY_BUCKETS as EXTENDER_BUCKETS
from gpupack.testing.dcgm import HostLabel, Workload, label_set
from gpupack.testing.history import (
    PROMETHEUS,
    PROMTOOL,
    Device,
    HistoryNode,
    PrometheusServer,
    Stint,
    Values,
    backfill,
    constant,
    steps,
    write_openmetrics,
)
from gpupack.webhook.metrics import LATENCY_BUCKETS as WEBHOOK_BUCKETS

M, H, D = 60.0, 3600.0, 86400.0
HISTORY = 8 * D
"""How far back the history goes from now."""
RECENT = 6 * H
"""The last hours written every minute; before them, every 5 minutes."""
FINE, COARSE = 60.0, 300.0
XID = "DCGM_FI_DEV_XID_ERRORS"
H100 = "NVIDIA H100 80GB HBM3"
H100_FB = 81559.0
A100 = "NVIDIA A100-SXM4-80GB"
A100_FB = 81920.0
MIG_40GB_FB = 40448.0
"""FB_USED + FB_FREE of a 3g.40gb or 4g.40gb instance on an A100-80GB."""
GIB = 1024.0**3
HAVE_PROMETHEUS = Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()
MISSING = f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)"


# The planted world ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signal:
    """A value that is `first` over the whole history, changed by `changes`: (seconds before now, value from then
    on), oldest first. `Signal(50).then(95, last=30 * M)`: 50, and 95 for the last 30 minutes."""

    first: float
    changes: tuple[tuple[float, float], ...] = ()

    def then(self, value: float, last: float) -> Signal:
        """This signal, and `value` for the last `last` seconds."""
        if self.changes and last >= self.changes[-1][0]:
            raise ValueError("changes go oldest first")
        return Signal(self.first, (*self.changes, (last, value)))

    def at(self, ago: float = 0.0) -> float:
        """The value `ago` seconds before now."""
        value = self.first
        for last, changed in self.changes:
            if ago <= last:
                value = changed
        return value

    def mean(self, last: float) -> float:
        """The time-weighted mean over the last `last` seconds."""
        bounds = [last, *(min(ago, last) for ago, _ in self.changes), 0.0]
        values = [self.first, *(v for _, v in self.changes)]
        return sum((a - b) * v for (a, b), v in zip(itertools.pairwise(bounds), values, strict=True)) / last

    def scaled(self, factor: float) -> Signal:
        return Signal(self.first * factor, tuple((ago, v * factor) for ago, v in self.changes))

    def values(self, now: float) -> Values:
        """As a function of sample times, for `gpupack.testing.history`."""
        return steps(self.first, *((now - ago, v) for ago, v in self.changes))


@dataclass(frozen=True, slots=True)
class PlantedGpu:
    """A whole GPU (`mig` None) or one MIG instance (`(profile, GPU_I_ID)`) as DCGM reports it."""

    index: int
    util: Signal | None
    """DCGM_FI_DEV_GPU_UTIL, percent; None on a MIG instance (the exporter writes none)."""
    fb_used: Signal
    """DCGM_FI_DEV_FB_USED, MiB; FB_FREE is `fb_total` minus it."""
    fb_total: float
    engine: Signal | None = None
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0-1; None: `util` / 100."""
    xid: Signal | None = Signal(0)
    """DCGM_FI_DEV_XID_ERRORS, the last XID code (0: none); None: not written (MIG instances)."""
    mig: tuple[str, int] | None = None
    pod: str | None = None
    """`namespace/name` of the pod the exporter maps the device to."""

    @property
    def engine_activity(self) -> Signal:
        if self.engine is not None:
            return self.engine
        assert self.util is not None
        return self.util.scaled(0.01)

    @property
    def slices(self) -> int:
        """Compute slices of a MIG instance (`3g.40gb`: 3 of 7)."""
        assert self.mig is not None
        return int(self.mig[0].split("g.", 1)[0])

    def memory_used(self, ago: float = 0.0) -> float:
        """FB_USED / (FB_USED + FB_FREE), 0-1."""
        return self.fb_used.at(ago) / self.fb_total


@dataclass(frozen=True, slots=True)
class PlantedNode:
    """One node: its DCGM devices and what kube-state-metrics reports of it."""

    name: str
    devices: tuple[PlantedGpu, ...]
    allocatable: Mapping[str, int]
    """GPU resources advertised, by kube-state-metrics' name; `cpu` and `memory` are added."""
    model: str = H100
    host_label: HostLabel = "Hostname"
    spot: bool = False
    """Labelled `node-type=spot` (kube_node_labels' `label_node_type`)."""
    cpu: float = 96.0
    memory: float = 1024 * GIB

    @property
    def gpus(self) -> tuple[int, ...]:
        """Indexes of the physical GPUs."""
        return tuple(sorted({d.index for d in self.devices}))

    def gpu_utilization(self, index: int, ago: float = 0.0) -> float:
        """A physical GPU's utilization in percent: GPU_UTIL, or a MIG GPU's engine activity folded by slices."""
        devices = [d for d in self.devices if d.index == index]
        if devices[0].mig is None:
            util = devices[0].util
            assert util is not None
            return util.at(ago)
        slices = sum(d.slices for d in devices)
        return 100.0 * sum(d.slices * d.engine_activity.at(ago) for d in devices) / slices

    def utilization(self, ago: float = 0.0) -> float:
        """The mean over its physical GPUs, percent."""
        return sum(self.gpu_utilization(i, ago) for i in self.gpus) / len(self.gpus)

    def mean_utilization(self, last: float) -> float:
        """The time-weighted mean over the last `last` seconds (every signal here is a step function)."""
        cuts = sorted({0.0, last, *(a for d in self.devices for s in _signals(d) for a, _ in s.changes if a < last)})
        spans = [(b - a, self.utilization((a + b) / 2)) for a, b in itertools.pairwise(cuts)]
        return sum(w * u for w, u in spans) / last


def _signals(device: PlantedGpu) -> list[Signal]:
    return [s for s in (device.util, device.engine, device.fb_used) if s is not None]


Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
PHASES: tuple[Phase, ...] = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@dataclass(frozen=True, slots=True)
class PlantedPod:
    """A pod as kube-state-metrics reports it: one container, in `phase` since `since` seconds before now (its
    series start then: it was created then)."""

    namespace: str
    name: str
    node: str | None
    phase: Phase
    requests: Mapping[str, float]
    """kube-state-metrics' resource name -> amount (cores, bytes, devices)."""
    since: float = HISTORY
    container: str = "main"
    owner: tuple[str, str] = ("ReplicaSet", "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpu_resources(self) -> dict[str, float]:
        return {r: v for r, v in self.requests.items() if r.startswith("nvidia_com_")}

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PlantedService:
    """One of gpupack's services: a target per replica (its pod), `up` 0 for the last `down_for` seconds."""

    job: str
    container: str
    pods: tuple[str, ...]
    down_for: float | None = None

    def up(self, ago: float = 0.0) -> int:
        return 0 if self.down_for is not None and ago <= self.down_for else 1


@dataclass(frozen=True, slots=True)
class Planted:
    """The whole world; every time is seconds before now."""

    nodes: tuple[PlantedNode, ...]
    pods: tuple[PlantedPod, ...]
    webhook: PlantedService
    extender: PlantedService
    admissions_per_minute: Mapping[str, int]
    """Per webhook replica, by workload class; all `outcome="mutated"`, `dry_run="false"`."""
    admission_latency: Mapping[float, float]
    """Cumulative fraction of admissions at or under each bucket bound (1 above the last)."""
    verb_calls_per_minute: int
    """Per verb (filter, prioritize), on the extender's leader (its first pod); the standby's counters stay 0."""
    verb_latency: Mapping[float, float]
    filtered_per_minute: Mapping[str, int]
    """Nodes removed by /filter per minute on the leader, by reason."""
    metrics_age: float
    """gpupack_extender_metrics_age_seconds; gpupack_extender_metrics_stale 0."""
    policy_versions: tuple[tuple[float, str], ...]
    """(since seconds before now, version), oldest first; mode `enforce`; on every replica of both services."""
    certificate_expires_in: float
    """The webhook's serving certificate expires this long after now (the extender has none: 0)."""
    unrouted: Mapping[str, int]
    """gpupack_webhook_unrouted_total by reason: counted at the webhook's start, before the history; no increase."""
    lease: str
    """gpupack_scheduler_lease_live{lease} on the webhook, 1 throughout."""
    alerts_active: frozenset[str]
    """Alerts whose expressions hold at now: active through /api/v1/alerts once the rules are loaded (pending at
    first where they have a `for`: alerts have no backfilled history)."""
    alerts_silent: frozenset[str]
    """Alerts whose expressions must not hold at now."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Why each node or pod is there, in words."""

    def node(self, name: str) -> PlantedNode:
        return next(n for n in self.nodes if n.name == name)

    def pod(self, key: str) -> PlantedPod:
        return next(p for p in self.pods if p.key == key)

    @property
    def gpu_nodes(self) -> tuple[PlantedNode, ...]:
        return tuple(n for n in self.nodes if n.devices)

    def requested(self, node: str) -> dict[str, float]:
        """GPU resources requested on `node` by pods not finished."""
        out: dict[str, float] = {}
        for pod in self.pods:
            if pod.node == node and not pod.finished:
                for resource, amount in pod.gpu_resources.items():
                    out[resource] = out.get(resource, 0.0) + amount
        return out

    @property
    def empty_gpu_nodes(self) -> tuple[str, ...]:
        """GPU nodes where no unfinished pod requests a GPU resource: the autoscaler may remove them."""
        return tuple(n.name for n in self.gpu_nodes if not self.requested(n.name))

    @property
    def pending_gpu_pods(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.pods if p.phase == "Pending" and p.gpu_resources)


def _whole(index: int, util: Signal, used: float | Signal, pod: str | None = None, **extra: Any) -> PlantedGpu:
    used_signal = used if isinstance(used, Signal) else Signal(used)
    return PlantedGpu(index, util, used_signal, extra.pop("fb_total", H100_FB), pod=pod, **extra)


def _exporter(node: str) -> PlantedPod:
    """The DCGM exporter's DaemonSet pod on a GPU node: CPU and memory only."""
    return PlantedPod(
        "gpu-operator",
        f"nvidia-dcgm-exporter-{node}",
        node,
        "Running",
        {"cpu": 0.1, "memory": 128 * 1024**2},
        container="nvidia-dcgm-exporter",
        owner=("DaemonSet", "nvidia-dcgm-exporter"),
    )


def _running(key: str, node: str, cpu: float = 4.0, memory: float = 32 * GIB, **gpu: float) -> PlantedPod:
    namespace, name = key.split("/")
    return PlantedPod(namespace, name, node, "Running", {"cpu": cpu, "memory": memory, **gpu})


_NODES = (
    PlantedNode(
        "hot-1",
        (
            _whole(0, Signal(50).then(95, last=30 * M), 48935, "ml/train-0"),
            _whole(1, Signal(50).then(95, last=30 * M), 48935, "ml/train-0"),
        ),
        {"nvidia_com_gpu": 2},
    ),
    PlantedNode("idle-1", (_whole(0, Signal(5), 0), _whole(1, Signal(5), 0)), {"nvidia_com_gpu": 2}),
    PlantedNode("under-1", (_whole(0, Signal(20), 16000), _whole(1, Signal(20), 16000)), {"nvidia_com_gpu": 2}),
    PlantedNode(
        "ok-1",
        (_whole(0, Signal(60), 40000, "ml/serve-0"), _whole(1, Signal(60), 40000, "ml/serve-1")),
        {"nvidia_com_gpu": 2},
    ),
    PlantedNode(
        "held-1",
        (
            # 90 % of the framebuffer (73,403 of 81,559 MiB) all along; compute 2 % for the last 2 h.
            _whole(0, Signal(60).then(2, last=2 * H), 73403, "ml/notebook-0"),
            _whole(1, Signal(70), 40780, "ml/serve-2"),
        ),
        {"nvidia_com_gpu": 2},
    ),
    PlantedNode(
        "mig-1",
        (
            # GPU 0 in MIG: 3g.40gb at 95 % of its 40,448 MiB, 4g.40gb at 10 %, both engines at 0.5.
            PlantedGpu(0, None, Signal(38426), MIG_40GB_FB, Signal(0.5), None, ("3g.40gb", 1), "ml/chat-0"),
            PlantedGpu(0, None, Signal(4045), MIG_40GB_FB, Signal(0.5), None, ("4g.40gb", 2), "ml/embed-0"),
            _whole(1, Signal(50), 32768, "ml/batch-0", fb_total=A100_FB),
        ),
        {"nvidia_com_gpu": 1, "nvidia_com_mig_3g_40gb": 1, "nvidia_com_mig_4g_40gb": 1},
        model=A100,
        host_label="hostname",
    ),
    PlantedNode(
        "xid-1",
        (_whole(0, Signal(60), 40000, xid=Signal(0).then(79, last=5 * M)), _whole(1, Signal(60), 40000)),
        {"nvidia_com_gpu": 2},
    ),
    PlantedNode("spot-1", (_whole(0, Signal(60), 40000, "ml/spot-0"),), {"nvidia_com_gpu": 1}, spot=True),
    PlantedNode("cpu-1", (), {}, cpu=32.0, memory=128 * GIB),
)

_PODS = (
    _running("ml/train-0", "hot-1", cpu=16, memory=128 * GIB, nvidia_com_gpu=2),
    _running("ml/serve-0", "ok-1", nvidia_com_gpu=1),
    _running("ml/serve-1", "ok-1", nvidia_com_gpu=1),
    _running("ml/notebook-0", "held-1", nvidia_com_gpu=1),
    _running("ml/serve-2", "held-1", nvidia_com_gpu=1),
    _running("ml/chat-0", "mig-1", nvidia_com_mig_3g_40gb=1),
    _running("ml/embed-0", "mig-1", nvidia_com_mig_4g_40gb=1),
    _running("ml/batch-0", "mig-1", nvidia_com_gpu=1),
    _running("ml/spot-0", "spot-1", nvidia_com_gpu=1),
    PlantedPod("ml", "done-0", "idle-1", "Succeeded", {"cpu": 4, "memory": 32 * GIB, "nvidia_com_gpu": 1}),
    PlantedPod("ml", "pending-0", None, "Pending", {"cpu": 4, "memory": 32 * GIB, "nvidia_com_gpu": 1}, since=30 * M),
    PlantedPod("ml", "pending-cpu", None, "Pending", {"cpu": 0.5, "memory": 1 * GIB}, since=30 * M),
    _running("web/api-0", "cpu-1", cpu=2, memory=4 * GIB),
    *(_exporter(n.name) for n in _NODES if n.devices),
)

PLANTED = Planted(
    nodes=_NODES,
    pods=_PODS,
    webhook=PlantedService(
        "gpupack-webhook", "webhook", ("gpupack-webhook-7d9f8b6c4-2xk9p", "gpupack-webhook-7d9f8b6c4-q8w4n"), 10 * M
    ),
    extender=PlantedService(
        "gpupack-extender-metrics",
        "extender",
        ("gpupack-scheduler-5c6d7e8f9-m3n7r", "gpupack-scheduler-5c6d7e8f9-t2v6z"),
    ),
    admissions_per_minute={"inference": 60, "training": 30, "batch": 10},
    # p50 1.9 ms, p99 10 ms by histogram_quantile's interpolation (50th of 100 in (1, 2.5] ms, 99th at 10 ms).
    admission_latency={0.0005: 0.02, 0.001: 0.2, 0.0025: 0.7, 0.005: 0.95, 0.01: 0.99, 0.025: 1.0},
    verb_calls_per_minute=30,
    # p50 1 ms, p99 4.75 ms (the 29.7th of 30 calls, in (2.5, 5] ms where 27 to 30 fall).
    verb_latency={0.0005: 0.1, 0.001: 0.5, 0.0025: 0.9, 0.005: 1.0},
    filtered_per_minute={"spot": 4, "no-resource": 20, "insufficient": 6, "hot": 1},
    metrics_age=30.0,
    policy_versions=((HISTORY, "3f2a9c1b7d40"), (2 * D, "8e41d0c2a9f7")),
    certificate_expires_in=10 * D,
    unrouted={"not-read-yet": 1},
    lease="gpupack-system/gpupack-scheduler",
    alerts_active=frozenset(
        {
            "GPUNodeHot",
            "GPUPodsPending",
            "GPUNodeIdle",
            "GPUNodeUnderused",
            "GPUMemoryHeldIdle",
            "MIGInstanceNearOOM",
            "GPUXidErrors",
            "GpupackWebhookDown",
            "GpupackCertificateExpiringSoon",
        }
    ),
    alerts_silent=frozenset(
        {
            "GpupackWebhookErrors",
            "GpupackWebhookSlow",
            "GpupackExtenderDown",
            "GpupackExtenderMetricsStale",
            "GpupackPolicyReloadFailed",
            "GpupackSchedulerUnrouted",
        }
    ),
    notes={
        "hot-1": "2 H100 at 95 % for the last 30 min, 50 % before: GPUNodeHot; its 7-day mean is about 50 %",
        "idle-1": "2 H100 at 5 % for 8 days, no running GPU pod: GPUNodeIdle (and under 30 %: GPUNodeUnderused)",
        "under-1": "2 H100 at 20 % for 8 days, no GPU pod: GPUNodeUnderused",
        "ok-1": "2 H100 at 60 %, two GPU pods",
        "held-1": "GPU 0 holds 90 % of its memory at 2 % GPU_UTIL for the last 2 h: GPUMemoryHeldIdle; GPU 1 at 70 %",
        "mig-1": "A100-80GB (`hostname`): GPU 0 in MIG, 3g.40gb at 95 % of its memory (MIGInstanceNearOOM), "
        "4g.40gb at 10 %, both engines 0.5; GPU 1 whole at 50 %",
        "xid-1": "GPU 0's XID_ERRORS 0 until 5 min ago, then 79: GPUXidErrors; no GPU pod",
        "spot-1": "node-type=spot, 1 H100 at 60 %",
        "cpu-1": "no GPU: in no GPU panel or rule",
        "ml/done-0": "Succeeded on idle-1 requesting a GPU: finished, so its request counts nowhere",
        "ml/pending-0": "Pending for the last 30 min requesting nvidia_com_gpu 1, no node: GPUPodsPending",
        "ml/pending-cpu": "Pending for the last 30 min requesting only CPU: not a GPU pod",
        "gpupack-webhook": "up 0 for the last 10 min on both replicas: GpupackWebhookDown; mutated admissions only, "
        "p99 10 ms; certificate expires in 10 days: GpupackCertificateExpiringSoon",
        "gpupack-extender-metrics": "up 1; fresh metrics (30 s, stale 0); no TLS (certificate expiry 0)",
        "gpupack_webhook_unrouted_total": "1 per webhook replica (not-read-yet, at its start), flat all along",
        "gpu-operator/nvidia-dcgm-exporter-*": "the exporter's DaemonSet pod on each GPU node: CPU and memory only",
    },
)


# OpenMetrics ------------------------------------------------------------------------------------------------------


def minute(now: float) -> float:
    """`now` rounded down to the minute: the last sample's time."""
    return float(int(now // 60) * 60)


def sample_times(now: float) -> np.ndarray:
    """Every 5 minutes from 8 days before `minute(now)`, every minute over the last 6 h, `minute(now)` last."""
    end = minute(now)
    coarse = np.arange(end - HISTORY, end - RECENT, COARSE)
    fine = np.arange(end - RECENT, end + FINE / 2, FINE)
    return np.concatenate([coarse, fine])


@dataclass(frozen=True, slots=True)
class Series:
    """One series: sample name, labels, values, from `first` (its process or object started then) to `last`."""

    name: str
    labels: Mapping[str, str]
    values: Values
    first: float = -np.inf
    last: float = np.inf


def _number(value: float) -> str:
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _family(out: TextIO, name: str, kind: str, help_text: str, series: Iterable[Series], times: np.ndarray) -> int:
    """One OpenMetrics family: its metadata, then each series' samples in time order."""
    out.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
    written = 0
    for one in series:
        at = times[(times >= one.first) & (times <= one.last)]
        prefix = f"{one.name}{label_set(one.labels)} "
        text = [_number(v) for v in one.values(at).tolist()]
        out.write("".join(f"{prefix}{v} {int(t)}\n" for v, t in zip(text, at.tolist(), strict=True)))
        written += len(at)
    return written


def _counter(per_minute: float, started: float) -> Values:
    """A counter that grows by `per_minute` every minute since `started`."""
    per_minute = round(per_minute, 9)  # 30 * 0.1 is 3.0000000000000004
    return lambda t: per_minute * (t - started) / 60.0


def _histogram(
    name: str,
    labels: Mapping[str, str],
    bounds: Sequence[float],
    cumulative: Mapping[float, float],
    per_minute: int,
    started: float,
) -> list[Series]:
    """`_bucket` (bounds as prometheus-client writes them, `+Inf` last), `_sum` (at each bucket's upper bound: an
    upper estimate) and `_count` series of `per_minute` observations a minute distributed as `cumulative`."""
    fractions = [max((f for le, f in cumulative.items() if le <= bound), default=0.0) for bound in bounds]
    out = [
        Series(f"{name}_bucket", {**labels, "le": repr(float(bound))}, _counter(per_minute * fraction, started))
        for bound, fraction in zip(bounds, fractions, strict=True)
    ]
    out.append(Series(f"{name}_bucket", {**labels, "le": "+Inf"}, _counter(per_minute, started)))
    mean = sum((f - g) * le for le, f, g in zip(bounds, fractions, [0.0, *fractions], strict=False))
    out.append(Series(f"{name}_sum", labels, _counter(per_minute * mean, started)))
    out.append(Series(f"{name}_count", labels, _counter(per_minute, started)))
    return out


def _ip(n: int, host: int) -> str:
    return f"10.0.{n}.{host}"


def _free(total: float, used: Values) -> Values:
    return lambda t: total - used(t)


def _dcgm_nodes(planted: Planted, now: float) -> list[HistoryNode]:
    nodes = []
    for n, node in enumerate(planted.nodes):
        if not node.devices:
            continue
        devices = []
        for gpu in node.devices:
            signals: dict[str, Values] = {}
            if gpu.util is not None:
                signals[GPU_UTIL] = gpu.util.values(now)
            signals[GR_ENGINE_ACTIVE] = gpu.engine_activity.values(now)
            used = gpu.fb_used.values(now)
            signals[FB_USED] = used
            signals[FB_FREE] = _free(gpu.fb_total, used)
            if gpu.xid is not None:
                signals[XID] = gpu.xid.values(now)
            stints = ()
            if gpu.pod is not None:
                namespace, pod = gpu.pod.split("/")
                stints = (Stint(now - HISTORY - H, Workload(pod, namespace)),)
            devices.append(Device(gpu.index, signals, gpu.mig, stints))
        target = {"job": "nvidia-dcgm-exporter", "instance": f"{_ip(n, 2)}:9400"}
        nodes.append(HistoryNode(node.name, devices, node.model, node.host_label, target=target))
    return nodes


KSM = {"job": "kube-state-metrics", "instance": "10.0.200.5:8080"}
UNITS = {"cpu": "core", "memory": "byte"}
Family = tuple[str, str, str, list[Series]]
"""(name, type, help, series)."""


def _ksm(planted: Planted, start: float, now: float) -> Iterator[Family]:
    """kube-state-metrics' families."""
    one = constant(1)
    allocatable: list[Series] = []
    node_labels: list[Series] = []
    for node in planted.nodes:
        resources = {"cpu": node.cpu, "memory": node.memory, "pods": 110, **node.allocatable}
        for resource, amount in resources.items():
            labels = {**KSM, "node": node.name, "resource": resource, "unit": UNITS.get(resource, "integer")}
            allocatable.append(Series("kube_node_status_allocatable", labels, constant(amount)))
        # a Karpenter spot node whose NodePool also sets the cluster's own label: counted once
        spot = {"label_node_type": "spot", "label_karpenter_sh_capacity_type": "spot"} if node.spot else {}
        node_labels.append(Series("kube_node_labels", {**KSM, "node": node.name, **spot}, one))
    yield "kube_node_status_allocatable", "gauge", "The allocatable for different resources of a node.", allocatable
    yield "kube_node_labels", "gauge", "Kubernetes labels converted to Prometheus labels.", node_labels

    info: list[Series] = []
    requests: list[Series] = []
    phases: list[Series] = []
    scheduled: list[Series] = []
    for p, pod in enumerate(planted.pods):
        first = max(start, now - pod.since)
        pod_labels = {**KSM, "namespace": pod.namespace, "pod": pod.name, "uid": f"5f0c{p:04d}-0000-4000-8000-{p:012d}"}
        node = {"node": pod.node} if pod.node else {}  # kube-state-metrics writes node="": no label
        n = next((i for i, x in enumerate(planted.nodes) if x.name == pod.node), 0)
        placed = {"host_ip": _ip(n, 1), "pod_ip": _ip(n, 100 + p)} if pod.node else {}
        kind, owner = pod.owner[0], pod.owner[1] or f"{pod.name.rsplit('-', 1)[0]}-6b8f9d7c5"
        created = {"created_by_kind": kind, "created_by_name": owner, "host_network": "false"}
        info.append(Series("kube_pod_info", {**pod_labels, **placed, **node, **created}, one, first))
        for resource, amount in pod.requests.items():
            labels = {**pod_labels, "container": pod.container, **node, "resource": resource}
            labels["unit"] = UNITS.get(resource, "integer")
            requests.append(Series("kube_pod_container_resource_requests", labels, constant(amount), first))
        for phase in PHASES:
            value = constant(1 if phase == pod.phase else 0)
            phases.append(Series("kube_pod_status_phase", {**pod_labels, "phase": phase}, value, first))
        for condition, holds in (("true", bool(pod.node)), ("false", not pod.node), ("unknown", False)):
            labels = {**pod_labels, "condition": condition}
            scheduled.append(Series("kube_pod_status_scheduled", labels, constant(1 if holds else 0), first))
    yield "kube_pod_info", "gauge", "Information about pod.", info
    yield (
        "kube_pod_container_resource_requests",
        "gauge",
        "The number of requested request resource by a container.",
        requests,
    )
    yield "kube_pod_status_phase", "gauge", "The pods current phase.", phases
    yield "kube_pod_status_scheduled", "gauge", "Describes the status of the scheduling process for the pod.", scheduled


def _targets(service: PlantedService, first_host: int) -> list[dict[str, str]]:
    """A ServiceMonitor's target labels, one target per replica."""
    return [
        {
            "job": service.job,
            "instance": f"{_ip(100, first_host + i)}:8080",
            "namespace": "gpupack-system",
            "pod": pod,
            "service": service.job,
            "endpoint": "metrics",
            "container": service.container,
        }
        for i, pod in enumerate(service.pods)
    ]


def _gpupack(planted: Planted, start: float, now: float) -> Iterator[Family]:
    """`up` and gpupack's own families."""
    webhook, extender = _targets(planted.webhook, 11), _targets(planted.extender, 21)
    started = start - H  # the processes started an hour before the history
    up: list[Series] = []
    for service, targets in ((planted.webhook, webhook), (planted.extender, extender)):
        down = () if service.down_for is None else ((now - service.down_for, 0.0),)
        up += [Series("up", t, steps(1, *down)) for t in targets]
    yield "up", "gauge", "Whether the target was scraped.", up

    admissions = [
        Series(
            "gpupack_webhook_admissions_total",
            {**t, "outcome": "mutated", "workload": workload, "dry_run": "false"},
            _counter(rate, started),
        )
        for t in webhook
        for workload, rate in planted.admissions_per_minute.items()
    ]
    yield "gpupack_webhook_admissions", "counter", "Admission reviews answered, by outcome and class.", admissions
    per_replica = sum(planted.admissions_per_minute.values())
    name = "gpupack_webhook_admission_duration_seconds"
    latency = [
        s
        for t in webhook
        for s in _histogram(name, t, WEBHOOK_BUCKETS, planted.admission_latency, per_replica, started)
    ]
    yield name, "histogram", "Time from request received to response ready.", latency
    unrouted = [
        Series("gpupack_webhook_unrouted_total", {**t, "reason": reason}, constant(count))
        for t in webhook
        for reason, count in planted.unrouted.items()
    ]
    yield "gpupack_webhook_unrouted", "counter", "Opted-in GPU pods left on default-scheduler.", unrouted
    lease = [Series("gpupack_scheduler_lease_live", {**t, "lease": planted.lease}, constant(1)) for t in webhook]
    yield "gpupack_scheduler_lease_live", "gauge", "1 while the gpupack scheduler's Lease is held.", lease

    name = "gpupack_extender_request_duration_seconds"
    verbs: list[Series] = []
    filtered: list[Series] = []
    for i, t in enumerate(extender):
        leader = i == 0  # the standby's children exist (created per verb and reason) and stay 0
        calls = planted.verb_calls_per_minute if leader else 0
        for verb in ("filter", "prioritize"):
            verbs += _histogram(name, {**t, "verb": verb}, EXTENDER_BUCKETS, planted.verb_latency, calls, started)
        filtered += [
            Series("gpupack_extender_filtered_nodes_total", {**t, "reason": r}, _counter(n if leader else 0, started))
            for r, n in planted.filtered_per_minute.items()
        ]
    yield name, "histogram", "Time from request received to response ready, per verb.", verbs
    yield "gpupack_extender_filtered_nodes", "counter", "Nodes removed by /filter, by reason.", filtered
    yield (
        "gpupack_extender_metrics_age_seconds",
        "gauge",
        "Age of the newest live GPU sample.",
        [Series("gpupack_extender_metrics_age_seconds", t, constant(planted.metrics_age)) for t in extender],
    )
    yield (
        "gpupack_extender_metrics_stale",
        "gauge",
        "1 when no live GPU sample is fresh.",
        [Series("gpupack_extender_metrics_stale", t, constant(0)) for t in extender],
    )

    both = webhook + extender
    info: list[Series] = []
    versions = planted.policy_versions
    for (since, version), later in zip(versions, [*versions[1:], None], strict=True):
        last = now - later[0] - FINE if later is not None else np.inf  # the old version's series ends
        for t in both:
            labels = {**t, "version": version, "mode": "enforce"}
            info.append(Series("gpupack_policy_info", labels, constant(1), now - since, last))
    yield "gpupack_policy_info", "gauge", "The policy version in force (value 1).", info
    yield (
        "gpupack_policy_reload_failures",
        "counter",
        "Policy versions refused because they did not validate.",
        [Series("gpupack_policy_reload_failures_total", t, constant(0)) for t in both],
    )
    expiry = now + planted.certificate_expires_in
    yield (
        "gpupack_certificate_expiry_timestamp_seconds",
        "gauge",
        "When the serving certificate expires.",
        [
            Series("gpupack_certificate_expiry_timestamp_seconds", t, constant(expiry if t in webhook else 0))
            for t in both
        ],
    )


def write_history(out: TextIO, now: float, planted: Planted = PLANTED) -> int:
    """The planted world's 8 days up to `minute(now)` as OpenMetrics with timestamps; returns the samples written."""
    end = minute(now)
    times = sample_times(now)
    start = float(times[0])
    written = write_openmetrics(out, _dcgm_nodes(planted, end), times, eof=False)
    for name, kind, help_text, series in (*_ksm(planted, start, end), *_gpupack(planted, start, end)):
        written += _family(out, name, kind, help_text, series, times)
    out.write("# EOF\n")
    return written


# Prometheus -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Recording:
    group: str
    interval: str | None
    rule: dict[str, Any]


def _recording_rules(rule_files: Sequence[Path]) -> list[_Recording]:
    out = []
    for path in rule_files:
        document = yaml.safe_load(Path(path).read_text()) or {}
        for group in document.get("groups") or []:
            for rule in group.get("rules") or []:
                if "record" in rule:
                    out.append(_Recording(group["name"], group.get("interval"), rule))
    return out


def rule_levels(rule_files: Sequence[Path]) -> list[list[_Recording]]:
    """The recording rules of `rule_files` in backfill order: level 0 reads only raw series, level n also the
    records of levels below it. `promtool tsdb create-blocks-from rules` evaluates every rule against the
    Prometheus given, so a rule reading another record sees it only once that record's blocks are loaded."""
    rules = _recording_rules(rule_files)
    names = {r.rule["record"] for r in rules}
    reads = {
        id(r): {
            n
            for n in names
            if n != r.rule["record"] and re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", r.rule["expr"])
        }
        for r in rules
    }
    level: dict[str, int] = {}
    for _ in range(len(rules) + 1):
        changed = False
        for r in rules:
            below = [level.get(n, -1) for n in reads[id(r)]]
            if any(b < 0 for b in below):
                continue
            mine = 1 + max(below, default=-1)
            if level.get(r.rule["record"], -1) < mine:
                level[r.rule["record"]], changed = mine, True
        if not changed:
            break
    unresolved = sorted(names - set(level))
    if unresolved:
        raise ValueError(f"recording rules that read each other in a cycle: {', '.join(unresolved)}")
    levels: list[list[_Recording]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for r in rules:
        levels[level[r.rule["record"]]].append(r)
    return levels


def _write_rules(rules: Sequence[_Recording], path: Path) -> Path:
    """A rule file of `rules`, in their groups (keeping each group's interval)."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rules:
        group = groups.setdefault(r.group, {"name": r.group, "rules": []})
        if r.interval is not None:
            group["interval"] = r.interval
        group["rules"].append(r.rule)
    path.write_text(yaml.safe_dump({"groups": list(groups.values())}, sort_keys=False))
    return path


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def seconds(duration: str) -> float:
    """A Prometheus duration (`30s`, `1h30m`) in seconds."""
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _block_hours(rules: Sequence[_Recording]) -> int:
    """The longest block promtool accepts (2, 6, 18, 54 or 162 h) whose range query at the smallest group interval
    stays within Prometheus's 11,000 points: promtool writes a block per rule and block, 2 h by default, and ~100
    blocks per rule over 8 days take a minute to write and slow every query after."""
    interval = min((seconds(r.interval) if r.interval else 60.0 for r in rules), default=60.0)
    return next((h for h in (162, 54, 18, 6) if h * 3600 / interval <= 11_000), 2)


def backfill_rules(url: str, rule_file: Path, start: float, end: float, out: Path, block_hours: int = 2) -> list[Path]:
    """`promtool tsdb create-blocks-from rules` of `rule_file` over [start, end] against `url`, evaluated every 60 s
    where a group sets no interval; the blocks it wrote into `out`. Raises RuntimeError with promtool's words."""
    command = [PROMTOOL, "tsdb", "create-blocks-from", f"--max-block-duration={block_hours}h", "rules"]
    command += [f"--url={url}", f"--output-dir={out}", f"--start={int(start)}", f"--end={int(end)}"]
    command += ["--eval-interval=60s", str(rule_file)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"promtool failed on {rule_file}: {(result.stdout + result.stderr).strip()[-3000:]}")
    return sorted(p for p in out.iterdir() if p.is_dir() and (p / "meta.json").exists())


def _without_intervals(rule_file: Path, directory: Path) -> Path:
    """`rule_file` itself, or a copy without its groups' `interval`, so that the global 1 s applies."""
    document = yaml.safe_load(Path(rule_file).read_text()) or {}
    groups = document.get("groups") or []
    if not any("interval" in g for g in groups):
        return Path(rule_file)
    for group in groups:
        group.pop("interval", None)
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / Path(rule_file).name
    copy.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


def get(url: str, path: str, **params: str | Sequence[str]) -> Any:
    """A Prometheus API call's `data`; raises RuntimeError unless its status is success."""
    query = urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(f"{url}{path}?{query}", timeout=30) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as err:
        with err:
            body = json.load(err)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def _evaluated(timestamp: str, since: float) -> bool:
    """Whether a rule's `lastEvaluation` (RFC 3339, nanoseconds; year 1 when never) is after `since`."""
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", timestamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp() > since


def wait_evaluated(url: str, since: float, timeout: float = 60.0) -> None:
    """Until every rule has been evaluated after `since`; RuntimeError naming a rule that failed or never ran."""
    deadline = time.monotonic() + timeout
    waiting: list[str] = []
    while time.monotonic() < deadline:
        groups = get(url, "/api/v1/rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        failed = [f"{r['name']}: {r.get('lastError')}" for r in rules if r.get("health") == "err"]
        if failed:
            raise RuntimeError(f"rules failed to evaluate: {'; '.join(failed)}")
        waiting = [r["name"] for r in rules if not _evaluated(r["lastEvaluation"], since)]
        if not waiting:
            return
        time.sleep(0.2)
    raise RuntimeError(f"rules not evaluated after {timeout:g}s: {', '.join(waiting)}")


@contextlib.contextmanager
def monitoring_prometheus(
    tmp_dir: Path, rule_files: Sequence[Path] = (), now: float | None = None, planted: Planted = PLANTED
) -> Iterator[str]:
    """A Prometheus over the planted history up to `minute(now)` (default: the current time), with the recording
    rules of `rule_files` backfilled over the 8 days and the files loaded (every group evaluated every second);
    yields its URL once every rule has been evaluated, stops it at exit. Takes ~10-20 s; `tmp_dir` holds the TSDB.

    Each level of recording rules (`rule_levels`) is backfilled against a Prometheus holding the levels below it,
    then Prometheus restarts with the new blocks: the last restart loads the rule files. Alerting rules are not
    backfilled; with no history of their own, an alert with a `for` is pending at first, not firing."""
    if not HAVE_PROMETHEUS:
        raise RuntimeError(MISSING)
    now = time.time() if now is None else now
    end = minute(now)
    oldest = end - HISTORY
    tmp_dir.mkdir(parents=True, exist_ok=True)
    text, tsdb = tmp_dir / "history.om", tmp_dir / "tsdb"
    with text.open("w") as out:
        write_history(out, now, planted)
    backfill(text, tsdb, block_hours=162)
    text.unlink()
    server = PrometheusServer(tsdb, oldest=oldest)
    try:
        server.wait_ready()
        if rule_files:
            for n, rules in enumerate(rule_levels(rule_files)):
                level = _write_rules(rules, tmp_dir / f"rules-level-{n}.yaml")
                blocks = backfill_rules(server.url, level, oldest, end, tmp_dir / f"blocks-{n}", _block_hours(rules))
                server.stop()
                for block in blocks:
                    shutil.move(block, tsdb / block.name)
                server = PrometheusServer(tsdb, oldest=oldest)  # the next level reads this one
                server.wait_ready()
            server.stop()
            loaded = [_without_intervals(path, tmp_dir / "loaded") for path in rule_files]
            started = time.time()
            server = PrometheusServer(tsdb, oldest=oldest, rule_files=loaded, evaluation_interval="1s")
            server.wait_ready()
            wait_evaluated(server.url, started)
        yield server.url
    finally:
        server.stop()
