"""The names the webhook writes and the extender reads: labels, annotations and extended resources.

This module is the whole contract between the two services (docs/design.md); both import it and
neither spells one of these strings itself.
"""

from __future__ import annotations

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


def mig_resource(profile: str) -> str:
    """The extended resource name of a MIG profile in the device plugin's `mixed` strategy."""
    return f"{RESOURCE_MIG_PREFIX}{profile}"


def is_gpu_resource(name: str, shared_resource: str = RESOURCE_GPU_SHARED) -> bool:
    """Whether a resource name is a GPU: a whole GPU, a time-sliced replica or a MIG instance."""
    return name == RESOURCE_GPU or name == shared_resource or name.startswith(RESOURCE_MIG_PREFIX)
