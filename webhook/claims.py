"""Which ResourceClaimTemplate a pod sized by memory references when the policy sizes through DRA (`dra.memorySizing`).

A MIG resource name pins a pod to one GPU model (`nvidia.com/mig-1g.5gb` exists on an A100-40GB only). A claim's
prioritized list (`firstAvailable`, GA in Kubernetes 1.36) can instead ask for the smallest MIG device that holds
the model, then each larger profile, then a whole GPU with enough memory, on whichever model a node has; the
DynamicResources plugin scores nodes by how early in the list their device comes. The claims come from one
ResourceClaimTemplate per memory size of the policy's profiles, built here from the policy (the chart and the
kustomize component ship them, `charts/generate.py`), so the webhook's choice and the templates agree.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from gpupack.core.dra import DRIVER
from gpupack.core.policy import ClassPolicy, MigProfileSpec, Policy
from gpupack.core.quantity import format_gib, parse_quantity
from gpupack.webhook.labels import WorkloadRequest
from gpupack.webhook.sizing import sharing_mode

CLAIM: Final = "gpupack-gpu"
"""The name of the pod's claim (`spec.resourceClaims[].name`) and of the container's (`resources.claims[].name`)."""
TEMPLATE_PREFIX: Final = "gpupack-gpu-"
MIG_CLASS: Final = "mig.nvidia.com"
GPU_CLASS: Final = "gpu.nvidia.com"
MAX_ALTERNATIVES: Final = 8
"""`firstAvailable` holds at most 8 sub-requests (resource.k8s.io/v1): the 7 smallest profiles, then a whole GPU."""


def template_name(profile: MigProfileSpec) -> str:
    """The template for pods that `profile` is the smallest fit of: named by its memory (`gpupack-gpu-10gi`)."""
    return TEMPLATE_PREFIX + profile.memory.lower()


def template_for(policy: Policy, memory: Decimal) -> str | None:
    """The template of the smallest profile of the policy that holds `memory` (None when none does: a whole GPU)."""
    for profile in policy.profiles_by_size:
        if profile.memory_bytes >= memory:
            return template_name(profile)
    return None


def _alternative(profile: MigProfileSpec) -> dict[str, Any]:
    name = "mig-" + profile.name.replace(".", "-").replace("+", "-")
    expression = f"device.attributes['{DRIVER}'].profile == '{profile.name}'"
    return {"name": name, "deviceClassName": MIG_CLASS, "selectors": [{"cel": {"expression": expression}}]}


def claim_templates(policy: Policy) -> list[dict[str, Any]]:
    """One ResourceClaimTemplate per memory size of the policy's profiles (no namespace: the caller sets it)."""
    profiles = policy.profiles_by_size
    templates: dict[str, dict[str, Any]] = {}
    for smallest in profiles:
        name = template_name(smallest)
        if name in templates:
            continue
        fitting: list[MigProfileSpec] = []
        for profile in profiles:
            if profile.memory_bytes >= smallest.memory_bytes and profile.name not in {p.name for p in fitting}:
                fitting.append(profile)
        alternatives = [_alternative(p) for p in fitting[: MAX_ALTERNATIVES - 1]]
        whole = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{smallest.memory}')) >= 0"
        alternatives.append(
            {"name": "whole-gpu", "deviceClassName": GPU_CLASS, "selectors": [{"cel": {"expression": whole}}]}
        )
        templates[name] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": alternatives}]}}},
        }
    return list(templates.values())


def claim_template(request: WorkloadRequest, cls: ClassPolicy, policy: Policy) -> tuple[str, str] | None:
    """(template, reason) for a pod the policy sizes through DRA: MIG sharing with `dra.memorySizing` on, and a
    memory some profile holds; None for every other pod (sized as before)."""
    if not policy.dra.memory_sizing or sharing_mode(request, cls)[0] != "mig":
        return None
    memory = request.gpu_memory if request.gpu_memory is not None else parse_quantity(cls.default_gpu_memory)
    template = template_for(policy, memory)
    if template is None:
        return None
    return template, f"the smallest GPU device with {format_gib(memory)} on any model (DRA, {template})"
