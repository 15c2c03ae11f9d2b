"""Container resources: which container gets the GPU, its GPU request and limit, and CPU/memory requests.

Cluster Autoscaler decides a node is idle from requests; a container without CPU or memory requests makes a GPU
node look emptier (or fuller) than it is, so every container of a GPU pod leaves with both.
"""

from __future__ import annotations

from gpupack.core import contract
from gpupack.core.claim_templates import CLAIM
from gpupack.core.k8s import Container, Pod
from gpupack.core.objects import names_gpu
from gpupack.core.policy import ClassPolicy, Policy
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.webhook.labels import LabelError
from gpupack.webhook.outcome import Notes
from gpupack.webhook.patches import PatchBuilder, Path
from gpupack.webhook.sizing import GpuChoice


def _gpu_keys(container: Container, shared: str) -> dict[str, str]:
    resources = container.resources
    found: dict[str, str] = {}
    if resources is None:
        return found
    is_gpu = contract.is_gpu_resource
    for table in (resources.limits, resources.requests):
        if table:
            for key, value in table.items():
                if is_gpu(key, shared) and key not in found:
                    found[key] = str(value)
    return found


def asks_for_gpu(container: Container, shared: str) -> bool:
    """Whether the container's requests or limits name a GPU resource (whole, time-sliced or MIG)."""
    resources = container.resources
    if resources is None:
        return False
    return any(table and names_gpu(table, shared) for table in (resources.requests, resources.limits))


def gpu_container(pod: Pod, shared: str) -> tuple[str, int]:
    """The container that gets the GPU, as (list field, index).

    The one named by `gpupack.io/container` (an app container or a sidecar), else the first app container that
    already asks for a GPU, else the first app container. Raises LabelError when the annotation names no
    container, or a plain init container: it runs to completion before the app starts, so a GPU given to it is
    held only during start-up while the app container keeps whatever GPU it asked for itself.
    """
    name = pod.annotations.get(contract.ANNOTATION_CONTAINER)
    if name is not None:
        for field, containers in (("containers", pod.spec.containers), ("initContainers", pod.spec.init_containers)):
            for index, container in enumerate(containers or []):
                if container.name != name:
                    continue
                if field == "initContainers" and container.restart_policy != "Always":
                    raise LabelError(
                        contract.ANNOTATION_CONTAINER,
                        name,
                        "an app container or a sidecar (restartPolicy: Always): this init container ends before "
                        "the app starts",
                    )
                return field, index
        names = [c.name for c in pod.spec.containers] + [c.name for c in pod.spec.init_containers or []]
        raise LabelError(contract.ANNOTATION_CONTAINER, name, "the name of one of the containers: " + ", ".join(names))
    for index, container in enumerate(pod.spec.containers):
        if asks_for_gpu(container, shared):
            return "containers", index
    return "containers", 0


def _same_kind_without_count(current: dict[str, str], choice: GpuChoice) -> bool:
    """Whole GPUs written in the pod with no `gpupack.io/gpus` label: the count is the pod's to choose."""
    return not choice.count_from_label and set(current) == {choice.resource} == {contract.RESOURCE_GPU}


def _container(pod: Pod, field: str, index: int) -> Container:
    containers = pod.spec.containers if field == "containers" else pod.spec.init_containers or []
    return containers[index]


def _keeps_its_own_gpu(
    current: dict[str, str], builder: PatchBuilder, policy: Policy, base: Path, said: str, reason: str, notes: Notes
) -> bool:
    """Whether the GPU resources the container names itself (`current`) stay instead of the policy's `said`: they
    do unless the policy enforces the GPU resource, in which case they are removed. Either way a note says so."""
    if not current:
        return False
    written = ", ".join(f"{k}={v}" for k, v in current.items())
    if not policy.enforces("gpu"):
        notes.add("conflict", f"kept the pod's {written}; policy gives {said} ({reason})")
        return True
    for key in current:
        builder.remove((*base, "requests"), key)
        builder.remove((*base, "limits"), key)
    notes.add("conflict", f"replaced {written} with {said}: the policy enforces the GPU resource")
    return False


def apply_gpu(
    pod: Pod, builder: PatchBuilder, policy: Policy, target: tuple[str, int], choice: GpuChoice, notes: Notes
) -> tuple[str, ...]:
    """Give the GPU container `choice` in requests and limits; a GPU the pod already names wins unless enforced.
    Returns the GPU resources the container asks for once patched."""
    field, index = target
    container = _container(pod, field, index)
    base: Path = ("spec", field, index, "resources")
    wanted = {choice.resource: str(choice.count)}
    current = _gpu_keys(container, policy.time_slicing.resource_name)
    said = f"{choice.resource}={choice.count}"
    if current and (current == wanted or _same_kind_without_count(current, choice)):
        return tuple(current)
    if _keeps_its_own_gpu(current, builder, policy, base, said, choice.reason, notes):
        return tuple(current)
    builder.set_many((*base, "requests"), wanted)
    builder.set_many((*base, "limits"), wanted)
    notes.add("gpu", f"{container.name} gets {said}: {choice.reason}")
    for warning in choice.warnings:
        notes.add("advice", warning)
    return (choice.resource,)


def apply_claim(
    pod: Pod, builder: PatchBuilder, policy: Policy, target: tuple[str, int], template: str, reason: str, notes: Notes
) -> tuple[str, ...]:
    """Give the GPU container the pod's claim from ResourceClaimTemplate `template` (`core.claim_templates`) instead
    of a GPU resource; a GPU resource the pod already names wins unless enforced (then it is removed). Returns the
    GPU resources the container asks for once patched (none with the claim)."""
    field, index = target
    container = _container(pod, field, index)
    base: Path = ("spec", field, index, "resources")
    current = _gpu_keys(container, policy.time_slicing.resource_name)
    said = f"claim {CLAIM} from ResourceClaimTemplate {template}"
    if _keeps_its_own_gpu(current, builder, policy, base, said, reason, notes):
        return tuple(current)
    claims = builder.current(("spec", "resourceClaims"))
    named = [c for c in claims if isinstance(c, dict) and c.get("name") == CLAIM] if isinstance(claims, list) else []
    if not named:
        builder.append(("spec", "resourceClaims"), {"name": CLAIM, "resourceClaimTemplateName": template})
    elif named[0].get("resourceClaimTemplateName") != template:
        notes.add("conflict", f"kept the pod's claim {CLAIM} ({named[0]}); policy gives {said}")
        return ()
    builder.append((*base, "claims"), {"name": CLAIM})
    notes.add("gpu", f"{container.name} gets {said}: {reason}")
    return ()


def _request(container: Container, resource: str, default: str, enforced: bool) -> str | None:
    """The request to write for one resource of one container, or None to leave it as it is."""
    resources = container.resources
    if resources is None:
        current = limit = None
    else:
        current = resources.requests.get(resource) if resources.requests else None
        if current is not None and not enforced:
            return None
        limit = resources.limits.get(resource) if resources.limits else None
    value = default
    try:
        if limit is not None and parse_quantity(limit) < parse_quantity(default):
            value = str(limit)  # a request above the limit is invalid: cap at the limit
    except QuantityError:
        return None  # the API server validated the pod; an unparsable limit is not ours to fix
    return None if current is not None and str(current) == value else value


def apply_requests(pod: Pod, builder: PatchBuilder, policy: Policy, cls: ClassPolicy, notes: Notes) -> None:
    """CPU and memory requests for app containers and sidecars that lack them (all of them when enforced).

    Plain init containers run before the app and do not add to the pod's steady footprint: left alone.
    """
    enforced = policy.enforces("requests")
    defaults = (("cpu", cls.cpu), ("memory", cls.memory))
    touched: list[str] = []
    for field, containers in (("containers", pod.spec.containers), ("initContainers", pod.spec.init_containers)):
        for index, container in enumerate(containers or ()):
            if field == "initContainers" and container.restart_policy != "Always":
                continue
            entries: dict[str, str] = {}
            for resource, default in defaults:
                value = _request(container, resource, default, enforced)
                if value is not None:
                    entries[resource] = value
            if entries:
                builder.set_many(("spec", field, index, "resources", "requests"), entries)
                touched.append(container.name + " " + " ".join(f"{k}={v}" for k, v in entries.items()))
    if touched:
        notes.add("requests", "requests set: " + ", ".join(touched))
