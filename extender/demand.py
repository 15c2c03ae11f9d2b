"""What a pod asks of a node: its GPU resource and count, CPU and memory, its class, and where it may run.

Requests follow the scheduler's arithmetic (the effective request is the larger of the app containers' sum
and the largest init container), and an extended resource given only as a limit counts as requested, as
the API server defaults it. The class comes from the webhook's annotation, else from the workload label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from extender.inventory import CPU, MEMORY
from extender.state import Requests
from gpupack import contract
from gpupack.policy import Policy, WorkloadClass
from gpupack.quantity import QuantityError, parse_quantity


class DemandError(ValueError):
    """A pod whose resources cannot be read (the message names the container and the field)."""


@dataclass(frozen=True, slots=True)
class PodDemand:
    """One pod's needs, as the filter and the scores read them."""

    key: str
    """`namespace/name` (the uid when there is one) identifying the pod in the assume cache."""
    requests: Mapping[str, int]
    """GPU resources in devices, `cpu` in millicores, `memory` in bytes."""
    gpu_resource: str | None
    """The GPU resource it asks for (None for a CPU-only pod)."""
    gpu_count: int
    workload: str | None
    """inference, training, batch, or None for a pod outside gpupack's classes."""
    latency_critical: bool
    avoid_spot: bool
    """Must never run on a spot node: inference, StatefulSet pods, and classes whose policy forbids spot."""

    @property
    def shape(self) -> tuple[object, ...]:
        """Everything a decision reads of the pod: pods of one shape get the same verdict on the same node."""
        return (
            self.gpu_resource,
            self.gpu_count,
            self.workload,
            self.latency_critical,
            self.avoid_spot,
            tuple(sorted(self.requests.items())),
        )

    @property
    def shared(self) -> bool:
        """Whether the pod shares a GPU (time-sliced replica or MIG instance)."""
        return self.gpu_resource is not None and self.gpu_resource != contract.RESOURCE_GPU


def _amount(resource: str, value: Any, where: str) -> int:
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise DemandError(f"{where}: {exc}") from exc
    if quantity < 0:
        raise DemandError(f"{where}: {value!r} is negative")
    return int(quantity * 1000) if resource == CPU else int(quantity)


def container_requests(container: Mapping[str, Any], shared_resource: str, where: str) -> dict[str, int]:
    """CPU, memory and GPU requests of one container (GPU limits count when requests omit them)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise DemandError(f"{where}.resources must be an object")
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        raise DemandError(f"{where}.resources.requests and .limits must be objects")
    out: dict[str, int] = {}
    for resource in {*requests, *limits}:
        gpu = contract.is_gpu_resource(resource, shared_resource)
        if resource not in (CPU, MEMORY) and not gpu:
            continue
        value = requests.get(resource)
        if value is None and (gpu or resource in (CPU, MEMORY)):
            value = limits.get(resource)  # the API server defaults requests to limits
        if value is not None:
            out[resource] = _amount(resource, value, f"{where}.resources.requests[{resource}]")
    return out


def pod_requests(spec: Mapping[str, Any], shared_resource: str = contract.RESOURCE_GPU_SHARED) -> dict[str, int]:
    """The effective requests of a pod spec: max(sum of app containers, largest init container) per resource."""
    total: dict[str, int] = {}
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise DemandError("spec.containers must be a list")
    for i, container in enumerate(containers):
        if isinstance(container, dict):
            for resource, n in container_requests(container, shared_resource, f"spec.containers[{i}]").items():
                total[resource] = total.get(resource, 0) + n
    init_containers = spec.get("initContainers") or []
    if not isinstance(init_containers, list):
        raise DemandError("spec.initContainers must be a list")
    for i, container in enumerate(init_containers):
        if isinstance(container, dict):
            for resource, n in container_requests(container, shared_resource, f"spec.initContainers[{i}]").items():
                total[resource] = max(total.get(resource, 0), n)
    return total


class RequestsCache:
    """Requests by the shape of a pod's container resources. The pods of one Deployment or Job share a shape:
    each shape is parsed once, and its requests tuple is held once for all of them (150,000 pods)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._cache: dict[bytes, Requests] = {}

    def requests(self, spec: dict[str, Any], shared_resource: str) -> Requests:
        """`pod_requests(spec)` as a tuple. Raises DemandError as it does (errors are not cached)."""
        try:
            key = orjson.dumps(
                (
                    shared_resource,
                    [c.get("resources") for c in spec.get("containers") or ()],
                    [c.get("resources") for c in spec.get("initContainers") or ()],
                )
            )
        except (TypeError, AttributeError):  # not the shape of a pod spec: let pod_requests say why
            return tuple(pod_requests(spec, shared_resource).items())
        found = self._cache.get(key)
        if found is None:
            found = tuple(pod_requests(spec, shared_resource).items())
            if len(self._cache) >= self._size:
                self._cache.clear()
            self._cache[key] = found
        return found


def _owned_by_statefulset(meta: Mapping[str, Any]) -> bool:
    return any(isinstance(o, dict) and o.get("kind") == "StatefulSet" for o in meta.get("ownerReferences") or [])


def pod_key(meta: Mapping[str, Any]) -> str:
    """How the extender names a pod: its uid, else namespace/name. The assume cache and the watch must agree,
    so that a pod seen bound replaces its assumption."""
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _workload_class(value: object) -> WorkloadClass | None:
    """The class a label or annotation names, None for anything else (a list there is not a class either)."""
    for name in contract.WORKLOAD_CLASSES:
        if value == name:
            return name
    return None


def demand_of(pod: Mapping[str, Any], policy: Policy, cache: RequestsCache | None = None) -> PodDemand:
    """The demand of a Pod object (as JSON). Raises DemandError naming the field that cannot be read.

    With `cache`, requests are parsed once per shape of the containers' resources (a Deployment's replicas)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise DemandError("Pod.metadata and Pod.spec must be objects")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    owners = meta.get("ownerReferences") or []
    if not isinstance(labels, dict) or not isinstance(annotations, dict) or not isinstance(owners, list):
        raise DemandError("Pod.metadata.labels and .annotations must be objects, .ownerReferences a list")
    shared = policy.time_slicing.resource_name
    requests = dict(cache.requests(spec, shared)) if cache is not None else pod_requests(spec, shared)
    gpus = [(r, n) for r, n in requests.items() if n > 0 and contract.is_gpu_resource(r, shared)]
    gpu_resource, gpu_count = min(gpus) if gpus else (None, 0)
    named = annotations.get(contract.ANNOTATION_CLASS) or labels.get(contract.LABEL_WORKLOAD)
    workload = _workload_class(named)
    critical = workload == "inference" and labels.get(contract.LABEL_LATENCY) != "tolerant"
    forbid = workload is not None and policy.classes.of(workload).spot == "forbid"
    return PodDemand(
        key=pod_key(meta),
        requests=requests,
        gpu_resource=gpu_resource,
        gpu_count=gpu_count,
        workload=workload,
        latency_critical=critical,
        avoid_spot=workload == "inference" or forbid or _owned_by_statefulset(meta),
    )


FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
