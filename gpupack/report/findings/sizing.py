"""Workloads that hold whole GPUs they barely use: the webhook's own sizing says what they should ask for instead.

A workload's GPUs are the ones the exporter mapped its pods to (DCGM); with a source that maps no pods
(nvidia-smi), the node's GPUs stand in when the workload's pods are the only GPU pods on the node, and the
workload is left out otherwise (its use cannot be told from its neighbours'). The size is the most framebuffer
any of its GPUs used in the window, with 25 % headroom, in whole GiB, given to the webhook's `choose_gpu` as the
`gpupack.io/gpu-memory` a developer would write: the MIG profile named is the one the webhook would pick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from gpupack.core import contract
from gpupack.core.kube import advertised_from
from gpupack.core.objects import GFD_MEMORY, labels_of
from gpupack.report.cluster import gpu_resources, key, uid, workload
from gpupack.report.document import Finding
from gpupack.report.findings.inputs import Inputs
from gpupack.report.usage import GpuUsage
from gpupack.webhook.labels import WorkloadRequest
from gpupack.webhook.sizing import GpuChoice, choose_gpu

HEADROOM = 1.25
"""Memory asked for over the most the workload used: activations and batch sizes vary."""
GIB = 2**30
"""GPU Feature Discovery's framebuffer size per GPU, MiB."""


def _gpus_of(inputs: Inputs, pods: list[dict[str, Any]]) -> list[GpuUsage]:
    """The GPUs the pods used: by the exporter's mapping, else their nodes' when they are alone there."""
    keys = {key(p) for p in pods}
    mapped = [g for g in inputs.physical if g.pods & keys]
    if mapped or any(g.pods for g in inputs.physical):
        return mapped
    assert inputs.cluster is not None
    nodes = {(p.get("spec") or {}).get("nodeName") for p in pods}
    out: list[GpuUsage] = []
    for node in nodes:
        others = [
            p for p in inputs.cluster.pods_on(str(node)) if key(p) not in keys and gpu_resources(p, inputs.policy)
        ]
        if not others:
            out += [g for g in inputs.physical if g.node == node]
    return out


def _size(max_used_mib: float) -> int:
    """GiB to ask for: the most used, with headroom, rounded up (at least 1)."""
    return max(1, math.ceil(max_used_mib * HEADROOM / 1024))


@dataclass(frozen=True)
class Resize:
    """One workload holding whole GPUs it barely uses, and what the webhook would give it instead."""

    workload: str
    """`Kind name` of its controller (`Pod namespace/name` without one)."""
    pods: tuple[dict[str, Any], ...]
    gpus: tuple[GpuUsage, ...]
    util: float
    """Mean utilization of its GPUs, percent."""
    used_mib: float
    """The most framebuffer any of its GPUs used."""
    fraction: float
    """The largest framebuffer fraction used."""
    labels: dict[str, str]
    """The gpupack labels to add to its pod template."""
    choice: GpuChoice
    """The webhook's sizing for those labels on this cluster."""


def resizes(inputs: Inputs) -> list[Resize]:
    """Every workload whose whole-GPU pods stay under both `oversized` thresholds, with the webhook's sizing; the
    savings replay admits these pods with the labels named here."""
    if inputs.cluster is None:
        return []
    t = inputs.thresholds
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in inputs.cluster.pods:
        if contract.RESOURCE_GPU in gpu_resources(pod, inputs.policy) and (pod.get("spec") or {}).get("nodeName"):
            groups.setdefault(workload(pod) or f"Pod {key(pod)}", []).append(pod)
    advertised = advertised_from(inputs.cluster.nodes)
    out: list[Resize] = []
    for owner, pods in sorted(groups.items()):
        gpus = _gpus_of(inputs, pods)
        utils = [u for g in gpus if (u := g.utilization(inputs.usage.metric)) is not None]
        peaks = [(g.fb_used_max, g.fb_total) for g in gpus if g.fb_used_max is not None and g.fb_total]
        if not utils or not peaks:
            continue
        util = sum(utils) / len(utils)
        used = max(m for m, _ in peaks)
        fraction = max(m / total for m, total in peaks)
        if util >= t.oversized_util or fraction >= t.oversized_memory:
            continue
        batch = owner.startswith(("Job ", "CronJob "))
        size = _size(used)
        request = WorkloadRequest("batch" if batch else "inference", Decimal(size * GIB))
        labels: dict[str, str] = {contract.LABEL_WORKLOAD: request.workload}
        if not batch:
            labels[contract.LABEL_GPU_MEMORY] = f"{size}Gi"
        choice = _choice(inputs, request, advertised)
        if choice.resource == contract.RESOURCE_GPU and not batch:
            # no MIG slice holds it: a time-sliced replica, where the cluster offers them, if it tolerates sharing
            tolerant = replace(request, latency="tolerant")
            shared = _choice(inputs, tolerant, advertised)
            if shared.resource != contract.RESOURCE_GPU and _shared_holds(inputs, shared.resource, size):
                choice = shared
                labels[contract.LABEL_LATENCY] = "tolerant"
        out.append(Resize(owner, tuple(pods), tuple(gpus), util, used, fraction, labels, choice))
    return out


def _shared_holds(inputs: Inputs, resource: str, size_gib: int) -> bool:
    """Whether a node time-slicing its GPUs (advertising `resource`) has GPUs with `size_gib` of framebuffer: a
    replica shares the whole GPU's memory with the others. GFD's `nvidia.com/gpu.memory` (MiB) says how much; a
    node without the label is given the benefit of the doubt."""
    assert inputs.cluster is not None
    for node in inputs.cluster.nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if str(allocatable.get(resource, "0")) in ("", "0"):
            continue
        memory = labels_of(node).get(GFD_MEMORY)
        if memory is None or not memory.isdigit() or int(memory) >= size_gib * 1024:
            return True
    return False


def _choice(inputs: Inputs, request: WorkloadRequest, advertised: frozenset[str] | None) -> GpuChoice:
    """The webhook's sizing of `request` on this cluster."""
    return choose_gpu(request, inputs.policy.classes.of(request.workload), inputs.policy, advertised)


def findings(inputs: Inputs) -> list[Finding]:
    """One `oversized-workload` per workload `resizes` finds."""
    out: list[Finding] = []
    for r in resizes(inputs):
        labels = ", ".join(f"{k}={v}" for k, v in r.labels.items())
        drop = (
            f"and drop its {contract.RESOURCE_GPU} request and limit (a GPU the pod names wins over the webhook's "
            "sizing unless the policy enforces `gpu`)"
        )
        if any(inputs.cluster is not None and inputs.cluster.claimed.get(uid(p)) for p in r.pods):  # a claim's GPU
            drop = "and drop the ResourceClaim that gives it the whole GPU (the webhook then sizes it)"
        if r.choice.resource == contract.RESOURCE_GPU:
            action = (
                f"its GPUs are {r.util:.0f} % used with {r.used_mib / 1024:.1f} GiB at most, but no MIG profile or "
                f"time-sliced GPU of the cluster holds {r.labels.get(contract.LABEL_GPU_MEMORY, 'it')}: offer MIG "
                f"or time-slicing on its nodes, then add {labels} to its pod template {drop}"
            )
        else:
            action = (
                f"add {labels} to its pod template {drop}: the webhook then gives it one {r.choice.resource} "
                f"({r.choice.reason}) instead of a whole GPU"
            )
        nodes = {g.node for g in r.gpus}
        out.append(
            Finding(
                "oversized-workload",
                "medium",
                action,
                workload=r.workload,
                node=next(iter(nodes)) if len(nodes) == 1 else None,
                evidence={
                    "pods": len(r.pods),
                    "gpus": len(r.gpus),
                    "util_mean": round(r.util, 1),
                    "fb_used_max_mib": round(r.used_mib),
                    "fb_used_fraction_max": round(r.fraction, 3),
                    "suggested": r.choice.resource,
                },
            )
        )
    return out
