"""Memory: GPUs whose framebuffer is held while their compute idles (the guide's (docs/method.md) second signal), and
MIG instances
whose framebuffer use nears their profile's memory (the guide's pitfall 1: a slice too small for the model)."""

from __future__ import annotations

from decimal import Decimal

from gpupack.core.gpus.catalog import mig_model_of
from gpupack.core.policy import MigProfileSpec, Policy
from gpupack.report.cluster import workload
from gpupack.report.document import Finding
from gpupack.report.findings.inputs import Inputs
from gpupack.report.usage import GpuUsage
from gpupack.webhook.sizing import smallest_fitting

MIB = Decimal(2**20)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def held_idle(inputs: Inputs, gpu: GpuUsage) -> Finding | None:
    """A `memory-held-idle` finding for `gpu`, or None."""
    t = inputs.thresholds
    if gpu.held_idle is None or gpu.held_idle < t.held_fraction:
        return None
    pods = inputs.pods_of(gpu)
    owners = sorted({w for p in pods if (w := workload(p))})
    named = sorted(gpu.pods)
    return Finding(
        "memory-held-idle",
        "medium",
        "the model stays loaded while the GPU computes little: scale its Deployment down off-peak (an HPA on "
        "requests), or let gpupack give it a MIG slice sized by gpupack.io/gpu-memory",
        node=gpu.node,
        gpu=gpu.gpu if gpu.instance is None else f"{gpu.gpu}/{gpu.instance}",
        pod=named[0] if len(named) == 1 else None,
        workload=owners[0] if len(owners) == 1 else None,
        evidence={
            "held_idle_fraction": round(gpu.held_idle, 3),
            "fb_used_fraction": None if gpu.fb_used_fraction is None else round(gpu.fb_used_fraction, 3),
            "util_mean": _round(gpu.utilization(inputs.usage.metric)),
            "pods": ", ".join(named) or None,
        },
    )


def _model_profiles(policy: Policy, model: str | None, profile: str) -> list[MigProfileSpec]:
    """The policy's MIG profiles of the GPU model an instance runs on, smallest first: the model named in
    `modelName` (`NVIDIA A100-SXM4-80GB`: A100, 80GB), else any model that has the instance's profile."""
    by_gpu: dict[str, list[MigProfileSpec]] = {}
    for spec in policy.profiles_by_size:
        by_gpu.setdefault(spec.gpu, []).append(spec)
    named = by_gpu.get(mig_model_of(model or "") or "", [])
    if any(s.name == profile for s in named):
        return named
    return next((specs for specs in by_gpu.values() if any(s.name == profile for s in specs)), [])


def near_oom(inputs: Inputs, gpu: GpuUsage) -> Finding | None:
    """A `mig-near-oom` finding for a MIG instance, or None. The profile's memory is the instance's own size as
    DCGM reports it (used + free), else the profile's nominal GiB."""
    if gpu.instance is None or gpu.profile is None or gpu.fb_used_max is None:
        return None
    specs = _model_profiles(inputs.policy, gpu.model, gpu.profile)
    current = next((s for s in specs if s.name == gpu.profile), None)
    size = gpu.fb_total or (float(current.memory_bytes / MIB) if current is not None else None)
    if not size or gpu.fb_used_max < inputs.thresholds.mig_near_oom * size:
        return None
    larger = smallest_fitting(specs, current.memory_bytes + 1) if current is not None else None
    if larger is not None:
        action = (
            f"the model nearly fills its {gpu.profile} slice: set gpupack.io/gpu-memory to {larger.memory} so the "
            f"webhook gives it {larger.name}"
        )
    else:
        action = f"the model nearly fills its {gpu.profile} slice, the largest there is: give it a whole GPU"
    named = sorted(gpu.pods)
    return Finding(
        "mig-near-oom",
        "high",
        action,
        node=gpu.node,
        gpu=f"{gpu.gpu}/{gpu.instance}",
        pod=named[0] if len(named) == 1 else None,
        evidence={
            "profile": gpu.profile,
            "fb_used_max_mib": round(gpu.fb_used_max),
            "profile_mib": round(size),
            "fraction": round(gpu.fb_used_max / size, 3),
            "next_profile": None if larger is None else larger.name,
        },
    )


def findings(inputs: Inputs) -> list[Finding]:
    """`memory-held-idle` on whole GPUs and MIG instances, `mig-near-oom` on instances."""
    out: list[Finding] = []
    for gpu in inputs.usage.gpus:
        for finding in (held_idle(inputs, gpu), near_oom(inputs, gpu)):
            if finding is not None:
                out.append(finding)
    return out
