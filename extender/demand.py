"""What a pod asks of a node: its GPU resource and count, CPU and memory, its class, and where it may run.

Requests follow the scheduler's arithmetic (the effective request is the larger of the app containers' sum
and the largest init container), and an extended resource given only as a limit counts as requested, as
the API server defaults it. The class comes from the webhook's annotation, else from the workload label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gpupack.core import contract
from gpupack.core.claim_templates import alternatives
from gpupack.core.objects import is_statefulset_pod
from gpupack.core.policy import Policy, WorkloadClass
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.extender.inventory import CPU, MEMORY
from gpupack.extender.state import Requests


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
    alternatives: tuple[str, ...] = ()
    """For a pod sized through one of gpupack's claim templates (and asking for no GPU resource itself): the GPU
    resources its claim's prioritized list asks for, in order, one device of the first a node has free
    (`gpupack.core.claim_templates.alternatives`). Empty for every other pod."""

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
            self.alternatives,
        )

    @property
    def asks_gpu(self) -> bool:
        """Whether the pod needs a GPU device: a GPU resource, or a claim from gpupack's templates."""
        return self.gpu_resource is not None or bool(self.alternatives)

    def on(self, allocatable: Mapping[str, int], used: Mapping[str, int]) -> PodDemand:
        """The demand on one node: a claim pod asks there for one device of the first of its alternatives the node
        has free, as DRA's allocator takes the first entry of a prioritized list that the node can satisfy; where
        none is free, the first the node offers (the filter then says it is full), else the first of all (the
        filter says the node has none). Every other pod's demand is the same on every node.

        kube-scheduler's DynamicResources plugin has already filtered out nodes where no alternative fits (its
        Filter runs before the extender's), which is why a whole GPU's memory floor is not checked here."""
        if not self.alternatives:
            return self
        offered = [r for r in self.alternatives if allocatable.get(r, 0) > 0]
        free = [r for r in offered if allocatable[r] - used.get(r, 0) >= 1]
        chosen = free[0] if free else offered[0] if offered else self.alternatives[0]
        return replace(self, gpu_resource=chosen, gpu_count=1, requests={**self.requests, chosen: 1}, alternatives=())

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


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}
_NO_FIELDS: Mapping[str, Any] = {}
_OBJECT = (dict, type(None))
_ARRAY = (list, type(None))
"""What an optional object or array field may be (tuples: `isinstance` with `dict | None` builds a union per call)."""
_METADATA_TYPES = (("labels", _OBJECT), ("annotations", _OBJECT), ("ownerReferences", _ARRAY))


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _wrong_type(where: str, expected: str, value: Any) -> DemandError:
    return DemandError(f"{where} must be {expected}, not {_json_type(value)}")


def _object(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """`parent[key]` when it is an object, an empty one when absent or null. Any other type raises DemandError
    naming `where`, an empty array or string included: `parent.get(key) or {}` read `spec: []` or
    `resources: []` as nothing requested, a CPU-only pod, where kube-scheduler's decoder refuses the pod."""
    value = parent.get(key)
    if value is None:
        return _NO_FIELDS
    if not isinstance(value, dict):
        raise _wrong_type(where, "an object", value)
    return value


def _array(parent: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """`parent[key]` when it is an array, an empty one when absent or null; DemandError for any other type."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong_type(where, "a list", value)
    return value


def container_requests(container: Mapping[str, Any], shared_resource: str, where: str) -> dict[str, int]:
    """CPU, memory and GPU requests of one container (GPU limits count when requests omit them). Raises
    DemandError naming the field of the wrong type or the unreadable quantity."""
    resources = _object(container, "resources", f"{where}.resources")
    requests = _object(resources, "requests", f"{where}.resources.requests")
    limits = _object(resources, "limits", f"{where}.resources.limits")
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
    """The effective requests of a pod spec: max(sum of app containers, largest init container) per resource.
    Raises DemandError naming the field when a part has the wrong type (a container that is not an object
    included) or a quantity cannot be read."""
    total: dict[str, int] = {}
    for i, container in enumerate(_array(spec, "containers", "spec.containers")):
        where = f"spec.containers[{i}]"
        if not isinstance(container, dict):
            raise _wrong_type(where, "an object", container)
        for resource, n in container_requests(container, shared_resource, where).items():
            total[resource] = total.get(resource, 0) + n
    for i, container in enumerate(_array(spec, "initContainers", "spec.initContainers")):
        where = f"spec.initContainers[{i}]"
        if not isinstance(container, dict):
            raise _wrong_type(where, "an object", container)
        for resource, n in container_requests(container, shared_resource, where).items():
            total[resource] = max(total.get(resource, 0), n)
    return total


MAX_SHAPE_KEY = 4096
"""The largest resources shape (JSON bytes) that is cached: a real one is a few hundred bytes; caching 20 MB
shapes let 60 requests take the extender past its 1 Gi limit."""


class RequestsCache:
    """Requests by the shape of a pod's container resources. The pods of one Deployment or Job share a shape:
    each shape is parsed once, and its requests tuple is held once for all of them (150,000 pods). Shapes larger
    than MAX_SHAPE_KEY are parsed every time and never kept."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._cache: dict[bytes, Requests] = {}

    def requests(self, spec: Mapping[str, Any], shared_resource: str) -> Requests:
        """`pod_requests(spec)` as a tuple. Raises DemandError as it does (errors are not cached).

        The key keeps each value's JSON type (`resources: []` is not `resources: {}`), so a shape is first read
        by `pod_requests`, which refuses wrong types; `containers` themselves must be lists here, or `{}` and
        `""` would share the key of a pod without containers."""
        containers, init_containers = spec.get("containers"), spec.get("initContainers")
        if not isinstance(containers, _ARRAY) or not isinstance(init_containers, _ARRAY):
            return tuple(pod_requests(spec, shared_resource).items())  # raises, naming the field
        try:
            key = orjson.dumps(
                (
                    shared_resource,
                    [c.get("resources") for c in containers or ()],
                    [c.get("resources") for c in init_containers or ()],
                )
            )
        except (TypeError, AttributeError):  # not the shape of a pod spec: let pod_requests say why
            return tuple(pod_requests(spec, shared_resource).items())
        if len(key) > MAX_SHAPE_KEY:
            return tuple(pod_requests(spec, shared_resource).items())
        found = self._cache.get(key)
        if found is None:
            found = tuple(pod_requests(spec, shared_resource).items())
            if len(self._cache) >= self._size:
                self._cache.clear()
            self._cache[key] = found
        return found


MAX_KEY = 512
"""The longest pod key kept (a uid is 36 characters, namespace/name at most 317): an assumption is held for
`assumeSeconds`, and 20 MB uids took 339 MB for 20 requests."""


def pod_key(meta: Mapping[str, Any]) -> str:
    """How the extender names a pod: its uid, else namespace/name. The assume cache and the watch must agree,
    so that a pod seen bound replaces its assumption. Raises DemandError for a key no Kubernetes object has."""
    key = str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    if len(key) > MAX_KEY:
        raise DemandError(f"Pod.metadata: a uid or name of {len(key)} characters is no Kubernetes pod's")
    return key


def _workload_class(value: object) -> WorkloadClass | None:
    """The class a label or annotation names, None for anything else (a list there is not a class either)."""
    for name in contract.WORKLOAD_CLASSES:
        if value == name:
            return name
    return None


def demand_of(pod: Mapping[str, Any], policy: Policy, cache: RequestsCache | None = None) -> PodDemand:
    """The demand of a Pod object (as JSON). Raises DemandError naming the field that cannot be read.

    With `cache`, requests are parsed once per shape of the containers' resources (a Deployment's replicas)."""
    meta = _object(pod, "metadata", "Pod.metadata")
    spec = _object(pod, "spec", "Pod.spec")
    labels, annotations, owners = meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences")
    if not isinstance(labels, _OBJECT) or not isinstance(annotations, _OBJECT) or not isinstance(owners, _ARRAY):
        wrong = next(f for f, ok in _METADATA_TYPES if not isinstance(meta.get(f), ok))
        raise DemandError(  # names the field (the first sentence is what callers have matched on)
            "Pod.metadata.labels and .annotations must be objects, .ownerReferences a list: "
            f".{wrong} is {_json_type(meta[wrong])}"
        )
    labels = labels or _NO_FIELDS
    annotations = annotations or _NO_FIELDS
    shared = policy.time_slicing.resource_name
    requests = dict(cache.requests(spec, shared)) if cache is not None else pod_requests(spec, shared)
    gpus = [(r, n) for r, n in requests.items() if n > 0 and contract.is_gpu_resource(r, shared)]
    gpu_resource, gpu_count = min(gpus) if gpus else (None, 0)
    named = annotations.get(contract.ANNOTATION_CLASS) or labels.get(contract.LABEL_WORKLOAD)
    workload = _workload_class(named)
    critical = workload == "inference" and labels.get(contract.LABEL_LATENCY) != "tolerant"
    forbid = workload is not None and policy.classes.of(workload).spot == "forbid"
    asked = () if gpus else _claimed(spec, policy)
    return PodDemand(
        key=pod_key(meta),
        requests=requests,
        gpu_resource=gpu_resource,
        gpu_count=gpu_count,
        workload=workload,
        latency_critical=critical,
        avoid_spot=workload == "inference" or forbid or is_statefulset_pod({"metadata": meta}),
        alternatives=asked,
    )


def _claimed(spec: Mapping[str, Any], policy: Policy) -> tuple[str, ...]:
    """The alternatives of the first of the pod's claims made from one of gpupack's templates (`spec.resourceClaims`
    naming a `resourceClaimTemplateName` the policy builds), empty when there is none. Raises DemandError for a
    `resourceClaims` that is not a list of objects, as kube-scheduler's decoder refuses it."""
    claims = _array(spec, "resourceClaims", "spec.resourceClaims")
    if not claims:
        return ()
    templates = alternatives(policy)
    for i, claim in enumerate(claims):
        if not isinstance(claim, dict):
            raise _wrong_type(f"spec.resourceClaims[{i}]", "an object", claim)
        template = claim.get("resourceClaimTemplateName")
        found = templates.get(template) if isinstance(template, str) else None
        if found is not None:
            return found
    return ()
