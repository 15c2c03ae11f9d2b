"""gpupack's ResourceClaimTemplates: their names, what each asks for, and the same ask in the device plugin's words.

A MIG resource name pins a pod to one GPU model (`nvidia.com/mig-1g.5gb` exists on an A100-40GB only). A claim's
prioritized list (`firstAvailable`, GA in Kubernetes 1.36) can instead ask for the smallest MIG device that holds
the model, then each larger profile, then a whole GPU with enough memory, on whichever model a node has. There is
one template per memory size of the policy's profiles, built here from the policy: the webhook names them
(`gpupack.webhook.claims`), the chart and the kustomize component ship them (`charts/generate.py`), and the
extender reads a pod's alternatives from them (`alternatives`). One owner, so the three agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpupack.core import contract
from gpupack.core.dra import DRIVER
from gpupack.core.policy import MigProfileSpec, Policy

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


def _fitting(policy: Policy) -> dict[str, tuple[MigProfileSpec, tuple[MigProfileSpec, ...]]]:
    """Per template name: the smallest profile it is named for, and the profiles it asks for in order (those with
    at least that memory, smallest first, each name once, as many as `firstAvailable` has room for)."""
    profiles = policy.profiles_by_size
    out: dict[str, tuple[MigProfileSpec, tuple[MigProfileSpec, ...]]] = {}
    for smallest in profiles:
        name = template_name(smallest)
        if name in out:
            continue
        fitting: dict[str, MigProfileSpec] = {}
        for profile in profiles:
            if profile.memory_bytes >= smallest.memory_bytes:
                fitting.setdefault(profile.name, profile)
        out[name] = (smallest, tuple(fitting.values())[: MAX_ALTERNATIVES - 1])
    return out


def _alternative(profile: MigProfileSpec) -> dict[str, Any]:
    name = "mig-" + profile.name.replace(".", "-").replace("+", "-")
    expression = f"device.attributes['{DRIVER}'].profile == '{profile.name}'"
    return {"name": name, "deviceClassName": MIG_CLASS, "selectors": [{"cel": {"expression": expression}}]}


def claim_templates(policy: Policy) -> list[dict[str, Any]]:
    """One ResourceClaimTemplate per memory size of the policy's profiles (no namespace: the caller sets it)."""
    templates = []
    for name, (smallest, fitting) in _fitting(policy).items():
        alternatives = [_alternative(p) for p in fitting]
        whole = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{smallest.memory}')) >= 0"
        alternatives.append(
            {"name": "whole-gpu", "deviceClassName": GPU_CLASS, "selectors": [{"cel": {"expression": whole}}]}
        )
        templates.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": alternatives}]}}},
            }
        )
    return templates


_last: tuple[Policy, Mapping[str, tuple[str, ...]]] | None = None
"""The alternatives of the policy last asked about: the extender asks on every call about a claim pod, and the
policy changes only when an admin edits it."""


def alternatives(policy: Policy) -> Mapping[str, tuple[str, ...]]:
    """Per template name, what its prioritized list asks for in the device plugin's resource names, in order: the
    MIG profiles' `nvidia.com/mig-<profile>`, then `nvidia.com/gpu`. (What NVIDIA's driver publishes reads as
    those resources, `gpupack.core.dra`, so the extender can judge a claim pod like a device-plugin pod.)"""
    global _last
    last = _last
    if last is not None and last[0] is policy:
        return last[1]
    found = {
        name: (*(contract.mig_resource(p.name) for p in fitting), contract.RESOURCE_GPU)
        for name, (_, fitting) in _fitting(policy).items()
    }
    _last = (policy, found)
    return found
