"""The names the webhook writes and the extender reads: labels, annotations and extended resources.

This module is the whole contract between the two services (docs/design.md); both import it and
neither spells one of these strings itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DOMAIN: Final = "gpupack.io"

# Pod labels set by developers (the opt-in switch and its modifiers).
LABEL_WORKLOAD: Final = f"{DOMAIN}/workload"
LABEL_GPU_MEMORY: Final = f"{DOMAIN}/gpu-memory"
LABEL_GPUS: Final = f"{DOMAIN}/gpus"
LABEL_LATENCY: Final = f"{DOMAIN}/latency"
LABEL_SHARING: Final = f"{DOMAIN}/sharing"
LABEL_CHECKPOINT: Final = f"{DOMAIN}/checkpoint"

# Namespace label that opts every pod of the namespace in (the policy's default class applies).
NAMESPACE_LABEL_ENABLED: Final = f"{DOMAIN}/enabled"

# Pod annotations: one set by developers, the rest written by the webhook.
ANNOTATION_CONTAINER: Final = f"{DOMAIN}/container"
ANNOTATION_POLICY_VERSION: Final = f"{DOMAIN}/policy-version"
ANNOTATION_CLASS: Final = f"{DOMAIN}/class"
ANNOTATION_AUDIT: Final = f"{DOMAIN}/audit"

# Annotations read by other components.
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
ANNOTATION_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
ANNOTATION_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
"""Karpenter's: on a pod, `"true"` (or a duration from the pod's start) keeps its node from voluntary disruption;
on a Node or NodeClaim it keeps that node. Karpenter never reads `safe-to-evict` (v1.15.0)."""

# The scheduler the API server names in every pod that names none (it defaults `spec.schedulerName` before
# webhooks run): a pod carrying it did not choose a scheduler.
DEFAULT_SCHEDULER: Final = "default-scheduler"

# Extended resources advertised by the NVIDIA device plugin.
RESOURCE_GPU: Final = "nvidia.com/gpu"
RESOURCE_GPU_SHARED: Final = "nvidia.com/gpu.shared"
RESOURCE_MIG_PREFIX: Final = "nvidia.com/mig-"
NVIDIA_RESOURCE_PREFIX: Final = "nvidia.com/"

WORKLOAD_CLASSES: Final = ("inference", "training", "batch")
LATENCIES: Final = ("critical", "tolerant")
SHARING_MODES: Final = ("mig", "time-slicing", "exclusive")
MAX_GPUS: Final = 64
"""The most whole GPUs `gpupack.io/gpus` asks for: more than any node holds, fewer than a typo's thousands."""


@dataclass(frozen=True, slots=True)
class Key:
    """A label or annotation of the contract, with what it means to the people who set or read it."""

    name: str
    on: str
    """What carries it: a pod label, a namespace label, a pod annotation."""
    set_by: str
    """Who writes it: the developer, the webhook, or another component gpupack reads."""
    values: str
    meaning: str


KEYS: Final = (
    Key(
        LABEL_WORKLOAD,
        "pod label",
        "developer",
        ", ".join(f"`{c}`" for c in WORKLOAD_CLASSES),
        "opts the pod in and picks its class",
    ),
    Key(
        LABEL_GPU_MEMORY,
        "pod label",
        "developer",
        "a quantity, e.g. `8Gi`",
        "GPU memory the model needs: sizes the MIG slice (also read as an annotation)",
    ),
    Key(
        LABEL_GPUS,
        "pod label",
        "developer",
        f"`1`..`{MAX_GPUS}`",
        "whole GPUs (training); more than one implies `exclusive`",
    ),
    Key(
        LABEL_LATENCY,
        "pod label",
        "developer",
        f"`{LATENCIES[0]}` (default), `{LATENCIES[1]}`",
        "tolerant inference shares a GPU by time-slicing; critical never does, and the extender keeps it off hot GPUs",
    ),
    Key(
        LABEL_SHARING,
        "pod label",
        "developer",
        ", ".join(f"`{m}`" for m in SHARING_MODES),
        "overrides the class's sharing mode",
    ),
    Key(
        LABEL_CHECKPOINT,
        "pod label",
        "developer",
        '`"true"`, `"false"`',
        "the job checkpoints: Cluster Autoscaler may evict it, and preemption takes it before training that does not",
    ),
    Key(
        NAMESPACE_LABEL_ENABLED,
        "namespace label",
        "admin",
        '`"true"`',
        "opts every GPU pod of the namespace in with the policy's `defaultClass`; its StatefulSet pods stay off spot",
    ),
    Key(
        ANNOTATION_CONTAINER,
        "pod annotation",
        "developer",
        "a container name",
        "the container that gets the GPU: an app container or a sidecar (an init container with `restartPolicy: "
        "Always`); default: the first app container that asks for a GPU, else the first app container",
    ),
    Key(
        ANNOTATION_CLASS,
        "pod annotation",
        "webhook",
        ", ".join(f"`{c}`" for c in WORKLOAD_CLASSES),
        "the class the webhook applied; the extender and the report read it",
    ),
    Key(
        ANNOTATION_POLICY_VERSION,
        "pod annotation",
        "webhook",
        "a digest",
        "the content digest of the policy that admitted the pod",
    ),
    Key(ANNOTATION_AUDIT, "pod annotation", "webhook", "text", "in `audit` mode: what the webhook would have changed"),
    Key(
        ANNOTATION_SAFE_TO_EVICT,
        "pod annotation",
        "webhook",
        '`"false"`',
        "Cluster Autoscaler's: written for classes with `safeToEvict: false` (training) unless the pod checkpoints, "
        "when `autoscalers` lists `cluster-autoscaler`",
    ),
    Key(
        ANNOTATION_DO_NOT_DISRUPT,
        "pod annotation",
        "webhook",
        '`"true"`',
        "Karpenter's: written beside `safe-to-evict` when `autoscalers` lists `karpenter`; the report also reads it "
        "on nodes",
    ),
    Key(
        ANNOTATION_MIRROR_POD,
        "pod annotation",
        "kubelet",
        "a hash",
        "a static pod's mirror: never evicted, so the report does not count it as blocking scale-down",
    ),
)
"""Every label and annotation gpupack reads or writes, in the order the reference lists them."""


def mig_resource(profile: str) -> str:
    """The extended resource name of a MIG profile in the device plugin's `mixed` strategy."""
    return f"{RESOURCE_MIG_PREFIX}{profile}"


def is_gpu_resource(name: str, shared_resource: str = RESOURCE_GPU_SHARED) -> bool:
    """Whether a resource name is a GPU: a whole GPU, a time-sliced replica or a MIG instance."""
    return name == RESOURCE_GPU or name == shared_resource or name.startswith(RESOURCE_MIG_PREFIX)
