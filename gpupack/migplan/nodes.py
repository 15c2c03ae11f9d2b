"""What the planner and `--apply` both ask of a node or a pod: is it a MIG node, does a pod hold a GPU.

One answer each, so the plan never calls a node free that `--apply` would then find busy, or the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpupack.core.contract import RESOURCE_MIG_PREFIX
from gpupack.extender.inventory import LABEL_MIG_CONFIG
from gpupack.report.cluster import FINISHED

CONFIG_LABEL: Final = LABEL_MIG_CONFIG
"""The MIG manager's layout label: the mig-parted config name to apply (the extender reads it too)."""
STATE_LABEL: Final = "nvidia.com/mig.config.state"
"""The MIG manager's answer: `pending`, then `success` or `failed`."""
CAPABLE_LABEL: Final = "nvidia.com/mig.capable"
"""GPU Feature Discovery's: the node's GPUs can run MIG."""


def is_mig_node(node: Mapping[str, Any]) -> bool:
    """A node the MIG manager looks after: a MIG config label, GFD's MIG-capable label, or MIG resources."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return (
        CONFIG_LABEL in labels
        or labels.get(CAPABLE_LABEL) == "true"
        or any(str(r).startswith(RESOURCE_MIG_PREFIX) for r in allocatable)
    )


def uses_gpus(pod: Mapping[str, Any]) -> bool:
    """A pod still running (not Succeeded/Failed) that requests or limits any `nvidia.com/*` resource, in a
    container or an init container: reconfiguring MIG under it would fail, and the MIG manager does not evict it."""
    if (pod.get("status") or {}).get("phase") in FINISHED:
        return False
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        for kind in ("requests", "limits"):
            if any(str(name).startswith("nvidia.com/") for name in resources.get(kind) or {}):
                return True
    return False
