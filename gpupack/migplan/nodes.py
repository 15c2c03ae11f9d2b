"""What the planner and `--apply` both ask of a node or a pod: is it a MIG node, does a pod hold a GPU.

One answer each, so the plan never calls a node free that `--apply` would then find busy, or the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpupack.core.contract import RESOURCE_MIG_PREFIX
from gpupack.core.objects import GFD_MIG_CAPABLE, MIG_CONFIG, MIG_CONFIG_STATE, is_finished, uses_gpu

CONFIG_LABEL: Final = MIG_CONFIG
"""The MIG manager's layout label: the mig-parted config name to apply (the extender reads it too)."""
STATE_LABEL: Final = MIG_CONFIG_STATE
"""The MIG manager's answer: `pending`, then `success` or `failed`."""
CAPABLE_LABEL: Final = GFD_MIG_CAPABLE
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
    """A pod still running (not Succeeded/Failed) that requests or limits a GPU resource, in a container or an init
    container (`gpupack.core.objects.uses_gpu`): reconfiguring MIG under it would fail, and the MIG manager does
    not evict it."""
    return not is_finished(pod) and uses_gpu(pod)
