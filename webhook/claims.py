"""Which ResourceClaimTemplate a pod sized by memory references when the policy sizes through DRA (`dra.memorySizing`).

The templates themselves, one per memory size of the policy's MIG profiles, are `gpupack.core.claim_templates`:
each asks for the smallest MIG device that holds the model, then each larger profile, then a whole GPU with enough
memory, on whichever model a node has. This module decides which one a pod gets.
"""

from __future__ import annotations

from decimal import Decimal

from gpupack.core.claim_templates import template_name
from gpupack.core.policy import ClassPolicy, Policy
from gpupack.core.quantity import format_gib, parse_quantity
from gpupack.webhook.labels import WorkloadRequest
from gpupack.webhook.sizing import sharing_mode


def template_for(policy: Policy, memory: Decimal) -> str | None:
    """The template of the smallest profile of the policy that holds `memory` (None when none does: a whole GPU)."""
    for profile in policy.profiles_by_size:
        if profile.memory_bytes >= memory:
            return template_name(profile)
    return None


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
