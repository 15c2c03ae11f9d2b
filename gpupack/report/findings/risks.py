"""Pods where sharing or spot puts them at risk: latency-critical or unlabelled inference on time-sliced GPUs
(the guide's (docs/method.md) pitfall 3: a neighbour's kernels slow it), and inference or StatefulSet pods on spot nodes
(the
guide's warning: an interruption takes a service down or loses state)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupack.core import contract
from gpupack.core.objects import controller_kind, controller_of, is_statefulset_pod, labels_of
from gpupack.report.cluster import gpu_resources, key, workload
from gpupack.report.document import Finding
from gpupack.report.findings.inputs import Inputs

BATCH_OWNERS = ("Job", "CronJob")
"""Controllers of run-to-completion pods: not serving anything whose latency matters."""


def serving(pod: Mapping[str, Any]) -> str | None:
    """Why the pod counts as inference, or None: labelled or admitted as inference, or, without a gpupack label,
    run by a ReplicaSet (a Deployment's: GPU Deployments serve models)."""
    labels = labels_of(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    said = labels.get(contract.LABEL_WORKLOAD)
    if said is None and isinstance(annotations, dict):
        said = annotations.get(contract.ANNOTATION_CLASS)
    if said is not None:
        return "inference pod" if said == "inference" else None
    return "Deployment pod without a gpupack label" if controller_kind(pod) == "ReplicaSet" else None


def _latency_critical(pod: dict[str, Any]) -> bool:
    """Labelled critical, or inference without a latency label (critical is the default), or a pod nobody said
    anything about that is not a job's (nobody said it tolerates sharing)."""
    found = labels_of(pod)
    latency = found.get(contract.LABEL_LATENCY)
    if latency is not None:
        return latency == "critical"
    if found.get(contract.LABEL_WORKLOAD) is not None:
        return found[contract.LABEL_WORKLOAD] == "inference"
    owner = controller_of(pod)
    return owner is None or owner.get("kind") not in BATCH_OWNERS


def _inference_or_stateful(pod: dict[str, Any]) -> str | None:
    """Why a pod must stay off spot, or None."""
    if is_statefulset_pod(pod):
        return "StatefulSet pod"
    return serving(pod)


def findings(inputs: Inputs) -> list[Finding]:
    """`shared-latency-critical` and `inference-on-spot`, one per pod."""
    assert inputs.cluster is not None
    shared = inputs.policy.time_slicing.resource_name
    out: list[Finding] = []
    for pod in inputs.cluster.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        resources = gpu_resources(pod, inputs.policy)
        if shared in resources and _latency_critical(pod):
            out.append(
                Finding(
                    "shared-latency-critical",
                    "high",
                    f"a time-sliced GPU shares its kernels with neighbours: give it a MIG slice "
                    f"({contract.LABEL_WORKLOAD}=inference, {contract.LABEL_GPU_MEMORY}=<its model's memory>), or "
                    f"say it tolerates sharing ({contract.LABEL_LATENCY}=tolerant)",
                    node=str(node),
                    pod=key(pod),
                    workload=workload(pod),
                    evidence={"resource": shared, "latency": labels_of(pod).get(contract.LABEL_LATENCY) or "unset"},
                )
            )
        why = _inference_or_stateful(pod)
        label = inputs.spot(str(node)) if why is not None else None
        if why is not None and label is not None:
            out.append(
                Finding(
                    "inference-on-spot",
                    "high",
                    f"a spot interruption takes it down: label it {contract.LABEL_WORKLOAD}=inference (gpupack then "
                    f"requires nodes without {label} or any other spot label), or add that node affinity yourself",
                    node=str(node),
                    pod=key(pod),
                    workload=workload(pod),
                    evidence={"why": why, "gpu_resources": ", ".join(sorted(resources)) or None},
                )
            )
    return out
