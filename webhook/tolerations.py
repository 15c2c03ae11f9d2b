"""The tolerations a GPU pod needs on GPU nodes that are tainted for GPU pods only.

GKE taints every GPU node pool `nvidia.com/gpu=present:NoSchedule`, and many other clusters taint their GPU pools
with the same key, so that CPU pods stay off the expensive nodes; the built-in ExtendedResourceToleration admission
plugin then tolerates, on each pod, a taint keyed by each extended resource the pod requests. It runs before the
mutating webhooks (docs/platform/admission.md), so it never sees the GPU resource gpupack writes for a pod that
only carries a label, nor a MIG or time-sliced resource gpupack put in place of `nvidia.com/gpu`: the pod would
never schedule on those pools. gpupack adds what that plugin would have added for the final request, and the
`nvidia.com/gpu` key for every GPU pod (a MIG node of such a pool is tainted with that key too). A toleration for a
taint no node carries changes nothing (policy `tolerateGpuTaints`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpupack.core import contract
from gpupack.core.k8s import Pod
from gpupack.webhook.outcome import Notes
from gpupack.webhook.patches import PatchBuilder
from gpupack.webhook.placement import tolerates


def tolerate_gpu_taints(pod: Pod, builder: PatchBuilder, resources: Iterable[str], notes: Notes) -> None:
    """Tolerate `nvidia.com/gpu` and a taint keyed by each GPU resource the pod asks for, as
    ExtendedResourceToleration does: `Exists`, effect `NoSchedule`."""
    added = []
    for key in dict.fromkeys((contract.RESOURCE_GPU, *resources)):
        toleration: dict[str, Any] = {"key": key, "operator": "Exists", "effect": "NoSchedule"}
        if not tolerates(pod, toleration):
            builder.append(("spec", "tolerations"), toleration)
            added.append(key)
    if added:
        notes.add("gpu", f"tolerates the GPU node taints {', '.join(added)}")
