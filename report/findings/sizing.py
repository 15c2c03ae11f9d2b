"""Workloads that hold whole GPUs they barely use: the webhook's own sizing says what they should ask for instead.

A workload's GPUs are the ones the exporter mapped its pods to (DCGM); with a source that maps no pods
(nvidia-smi), the node's GPUs stand in when the workload's pods are the only GPU pods on the node, and the
workload is left out otherwise (its use cannot be told from its neighbours'). The size is the most framebuffer
any of its GPUs used in the window, with 25 % headroom, in whole GiB, given to the webhook's `choose_gpu` as the
`gpupack.io/gpu-memory` a developer would write: the MIG profile named is the one the webhook would pick.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from gpupack import contract
from gpupack.kube import advertised_from
from report.cluster import gpu_resources, key, workload
from report.document import Finding
from report.findings.inputs import Inputs
from report.usage import GpuUsage
from webhook.labels import WorkloadRequest
from webhook.sizing import choose_gpu

HEADROOM = 1.25
"""Memory asked for over the most the workload used: activations and batch sizes vary."""
GIB = 2**30


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


def findings(inputs: Inputs) -> list[Finding]:
    """One `oversized-workload` per workload whose whole-GPU pods stay under both thresholds."""
    if inputs.cluster is None:
        return []
    t = inputs.thresholds
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in inputs.cluster.pods:
        if contract.RESOURCE_GPU in gpu_resources(pod, inputs.policy) and (pod.get("spec") or {}).get("nodeName"):
            groups.setdefault(workload(pod) or f"Pod {key(pod)}", []).append(pod)
    advertised = advertised_from(inputs.cluster.nodes)
    out: list[Finding] = []
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
        choice = choose_gpu(request, inputs.policy.classes.of(request.workload), inputs.policy, advertised)
        labels = f"{contract.LABEL_WORKLOAD}={request.workload}"
        if not batch:
            labels += f", {contract.LABEL_GPU_MEMORY}={size}Gi"
        if choice.resource == contract.RESOURCE_GPU:
            action = (
                f"its GPUs are {util:.0f} % used with {used / 1024:.1f} GiB at most, but no MIG profile of the "
                f"cluster holds {size}Gi: add {labels} and {contract.LABEL_LATENCY}=tolerant for a time-sliced "
                "replica, or offer MIG on its nodes"
            )
        else:
            action = (
                f"add {labels} to its pod template: the webhook then gives it one {choice.resource} "
                f"({choice.reason}) instead of a whole GPU"
            )
        out.append(
            Finding(
                "oversized-workload",
                "medium",
                action,
                workload=owner,
                node=next(iter({g.node for g in gpus})) if len({g.node for g in gpus}) == 1 else None,
                evidence={
                    "pods": len(pods),
                    "gpus": len(gpus),
                    "util_mean": round(util, 1),
                    "fb_used_max_mib": round(used),
                    "fb_used_fraction_max": round(fraction, 3),
                    "suggested": choice.resource,
                },
            )
        )
    return out
