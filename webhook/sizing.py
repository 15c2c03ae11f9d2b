"""Which GPU resource a pod gets: a MIG profile sized by memory, a time-sliced replica, or whole GPUs.

MIG profiles are chosen among those the cluster offers: the policy's list, narrowed to what some node
advertises when the API could be read. Among profiles that fit, the least memory wins, then the fewest compute
slices, so a small model never takes a slice with compute it will not use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from gpupack.core import contract
from gpupack.core.policy import ClassPolicy, MigProfileSpec, Policy, Sharing
from gpupack.core.quantity import format_gib, parse_quantity
from gpupack.webhook.labels import WorkloadRequest

# Every MIG admission renders its size for people; Decimal arithmetic makes that a visible cost, and the
# sizes asked for are few, so the renderings are cached (Decimal is immutable and hashable).
_gib = lru_cache(maxsize=256)(format_gib)


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """The GPU resource for the pod's GPU container, why, and what the developer should know."""

    resource: str
    count: int
    reason: str
    warnings: tuple[str, ...] = ()
    count_from_label: bool = False


# Both inputs change only when the policy is reloaded or the cluster read again, and the answer took 5 µs of
# every MIG admission: it is kept, keyed by the policy's profiles (held in the entry, so that their id cannot
# be reused by another tuple while the entry lives) and the advertised resources.
_OFFERED: dict[tuple[int, frozenset[str] | None], tuple[tuple[MigProfileSpec, ...], tuple[MigProfileSpec, ...]]] = {}
_OFFERED_KEPT = 16


def offered_profiles(policy: Policy, advertised: frozenset[str] | None) -> tuple[MigProfileSpec, ...]:
    """Profiles of the policy that some node advertises (all when that is unknown), smallest first."""
    profiles = policy.profiles_by_size
    key = (id(profiles), advertised)
    seen = _OFFERED.get(key)
    if seen is not None and seen[0] is profiles:
        return seen[1]
    offered = profiles if advertised is None else tuple(p for p in profiles if p.resource in advertised)
    if len(_OFFERED) >= _OFFERED_KEPT:
        _OFFERED.clear()
    _OFFERED[key] = (profiles, offered)
    return offered


def smallest_fitting(profiles: Iterable[MigProfileSpec], memory: Decimal) -> MigProfileSpec | None:
    """The profile with at least `memory`: least memory first, then fewest compute slices, then name.

    `profiles` come smallest first (Policy.profiles_by_size), so the first that fits is the answer.
    """
    for profile in profiles:
        if profile.memory_bytes >= memory:
            return profile
    return None


def sharing_mode(request: WorkloadRequest, cls: ClassPolicy) -> tuple[Sharing, str]:
    """The sharing mode and where it came from: an explicit label, the latency label, a GPU count, or the class."""
    if request.sharing is not None:
        return request.sharing, f"label {contract.LABEL_SHARING}"
    if request.gpus is not None and request.gpus > 1:
        return "exclusive", f"{contract.LABEL_GPUS}={request.gpus}"
    if request.latency == "tolerant" and cls.sharing == "mig":
        return "time-slicing", "latency tolerant"
    if request.latency == "critical" and cls.sharing == "time-slicing":
        return "mig", "latency critical never time-slices"
    return cls.sharing, f"{request.workload} default"


def choose_gpu(
    request: WorkloadRequest, cls: ClassPolicy, policy: Policy, advertised: frozenset[str] | None
) -> GpuChoice:
    """The GPU resource and count for an opted-in pod."""
    mode, why = sharing_mode(request, cls)
    if mode == "time-slicing":
        return GpuChoice(policy.time_slicing.resource_name, 1, f"one time-sliced replica, {why}")
    if mode == "exclusive":
        return GpuChoice(contract.RESOURCE_GPU, request.gpus or 1, f"whole GPUs, {why}", (), request.gpus is not None)
    return _choose_mig(request, cls, policy, advertised)


def _choose_mig(
    request: WorkloadRequest, cls: ClassPolicy, policy: Policy, advertised: frozenset[str] | None
) -> GpuChoice:
    warnings: list[str] = []
    memory = request.gpu_memory
    if memory is None:
        memory = parse_quantity(cls.default_gpu_memory)
        warnings.append(
            f"no {contract.LABEL_GPU_MEMORY} label: sized for {cls.default_gpu_memory}; "
            f"set it, e.g. {contract.LABEL_GPU_MEMORY}=8Gi"
        )
    profiles = offered_profiles(policy, advertised)
    if not profiles:
        warnings.append("no node advertises a MIG profile of the policy: a whole GPU instead")
        return GpuChoice(contract.RESOURCE_GPU, 1, "no MIG profile offered", tuple(warnings))
    profile = smallest_fitting(profiles, memory)
    if profile is None:
        largest = max(profiles, key=lambda p: p.memory_bytes)
        warnings.append(f"{_gib(memory)} exceeds the largest MIG profile ({largest.name}): a whole GPU instead")
        return GpuChoice(contract.RESOURCE_GPU, 1, f"{_gib(memory)} fits no MIG profile", tuple(warnings))
    return GpuChoice(profile.resource, 1, f"smallest MIG slice with {_gib(memory)}", tuple(warnings))
