"""DCGM exporter `/metrics` text built from a small description of nodes and GPUs, as the exporter writes it.

One node is one exporter (a DaemonSet pod): every series carries `gpu, UUID, pci_bus_id, device, modelName`, the
host label (`Hostname` before dcgm-exporter #655, `hostname` after), optionally `DCGM_FI_DRIVER_VERSION`, and
`container, namespace, pod` of the workload using the GPU when Kubernetes mapping is on. A whole GPU reports
`DCGM_FI_DEV_GPU_UTIL` (0-100) and `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1); a MIG GPU reports per instance
(`GPU_I_PROFILE`, `GPU_I_ID`) the engine activity and memory but no GPU_UTIL (dcgm-exporter #216, #430).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

HostLabel = Literal["Hostname", "hostname"]

HELP: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
}
"""The exporter's HELP text per field gpupack reads or alerts on. XID_ERRORS is a gauge holding the last XID code
(0: none); `samples()` writes no series of it, histories (`gpupack.testing.history`) and alert fixtures do."""


@dataclass(frozen=True, slots=True)
class Workload:
    """The pod the exporter maps a GPU (or MIG instance) to."""

    pod: str
    namespace: str = "default"
    container: str = "main"


@dataclass(frozen=True, slots=True)
class Gpu:
    """A whole GPU (or a time-sliced one): utilization in percent, as DCGM_FI_DEV_GPU_UTIL."""

    util: float
    fb_used: float = 0.0
    fb_total: float = 81559.0
    workload: Workload | None = None
    engine_active: float | None = None
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1); None writes util / 100."""


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance: its profile (`3g.40gb`: 3 compute slices of 7), id and engine activity 0-1."""

    profile: str
    instance_id: int
    activity: float
    fb_used: float = 0.0
    fb_total: float = 19968.0
    workload: Workload | None = None


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A GPU in MIG mode: series per instance only."""

    instances: Sequence[MigInstance]


@dataclass(frozen=True, slots=True)
class Node:
    """One node's exporter: its GPUs in index order."""

    name: str
    gpus: Sequence[Gpu | MigGpu]
    model: str = "NVIDIA H100 80GB HBM3"
    host_label: HostLabel = "hostname"
    driver_version: str | None = "550.90.07"


def gpu_uuid(node: str, index: int) -> str:
    """A stable, realistic-looking GPU UUID."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{index}')}"


def series_labels(
    node: str,
    host_label: HostLabel,
    model: str,
    driver_version: str | None,
    index: int,
    mig: tuple[str, int] | None = None,
    workload: Workload | None = None,
) -> dict[str, str]:
    """The labels the exporter of `node` writes on a series of GPU `index` (of MIG instance `(profile, id)`),
    mapped to `workload`."""
    labels = {
        "gpu": str(index),
        "UUID": gpu_uuid(node, index),
        "pci_bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": model,
    }
    if mig is not None:
        labels["GPU_I_PROFILE"] = mig[0]
        labels["GPU_I_ID"] = str(mig[1])
    labels[host_label] = node
    if driver_version:
        labels["DCGM_FI_DRIVER_VERSION"] = driver_version
    if workload is not None:
        labels.update(container=workload.container, namespace=workload.namespace, pod=workload.pod)
    return labels


def _labels(node: Node, index: int, mig: MigInstance | None, workload: Workload | None) -> dict[str, str]:
    instance = None if mig is None else (mig.profile, mig.instance_id)
    return series_labels(node.name, node.host_label, node.model, node.driver_version, index, instance, workload)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_set(labels: Mapping[str, str]) -> str:
    """`{k="v",...}` as the text formats (Prometheus 0.0.4 and OpenMetrics) write it, values escaped."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _line(name: str, labels: dict[str, str], value: float, timestamp: float | None) -> str:
    stamp = f" {round(timestamp * 1000)}" if timestamp is not None else ""
    return f"{name}{label_set(labels)} {value:g}{stamp}"


def samples(nodes: Iterable[Node]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every series the exporters would write, per metric name: (labels, value)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in HELP}
    for node in nodes:
        for index, gpu in enumerate(node.gpus):
            if isinstance(gpu, Gpu):
                labels = _labels(node, index, None, gpu.workload)
                active = gpu.engine_active if gpu.engine_active is not None else gpu.util / 100.0
                out["DCGM_FI_DEV_GPU_UTIL"].append((labels, gpu.util))
                out["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append((labels, active))
                out["DCGM_FI_DEV_FB_USED"].append((labels, gpu.fb_used))
                out["DCGM_FI_DEV_FB_FREE"].append((labels, gpu.fb_total - gpu.fb_used))
                continue
            for mig in gpu.instances:
                labels = _labels(node, index, mig, mig.workload)
                out["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append((labels, mig.activity))
                out["DCGM_FI_DEV_FB_USED"].append((labels, mig.fb_used))
                out["DCGM_FI_DEV_FB_FREE"].append((labels, mig.fb_total - mig.fb_used))
    return out


def exposition(nodes: Iterable[Node], timestamp: float | None = None) -> str:
    """Prometheus text format (0.0.4) with HELP and TYPE lines; `timestamp` (epoch s) is written in ms when given."""
    lines: list[str] = []
    for name, series in samples(nodes).items():
        if not series:
            continue
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
        lines += [_line(name, labels, value, timestamp) for labels, value in series]
    return "\n".join(lines) + "\n"
