"""GPUs a Dynamic Resource Allocation driver publishes, and the claims that hold them (docs/platform/dra.md).

On a node whose GPUs come from NVIDIA's DRA driver (`gpu.nvidia.com`) the Node object says nothing about them:
`status.allocatable` has no `nvidia.com/*`. The driver publishes each GPU and each MIG device as a device of a
ResourceSlice (pool = the node's name), and kube-scheduler records what it hands out in ResourceClaims. This
module is the one owner of those facts: it reads slices and claims into small records, and says what a node's
devices amount to in the vocabulary the rest of gpupack speaks, the device plugin's resource names (a whole GPU
is one `nvidia.com/gpu`, a MIG device one `nvidia.com/mig-<profile>`). That is also the name a pod asks for when a
DeviceClass's `extendedResourceName` lets kube-scheduler satisfy a plain extended-resource request from DRA
devices, so placement, fragmentation and the report treat both kinds of node with the same code.

Partitionable GPUs (`DRAPartitionableDevices`) publish every MIG placement a GPU could be carved into, each
consuming the GPU's shared counters. Counting those devices would offer a GPU several times over; a node offers,
per profile, the instances of it its GPUs can hold at once (`offered`), and its capacity is its physical GPUs.

Everything here is pure. A malformed object raises ValueError naming the object and the field; callers skip it
with a logged reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from gpupack.core import contract
from gpupack.core.objects import GFD_COUNT, GFD_MEMORY, GFD_PRODUCT, json_object
from gpupack.core.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

DRIVER: Final = "gpu.nvidia.com"
"""NVIDIA's GPU DRA driver: its devices are the GPUs gpupack counts; other drivers' devices are left alone."""
RESOURCE_SLICES: Final = ("resource.k8s.io", "v1", "resourceslices")
DEVICE_CLASSES: Final = ("resource.k8s.io", "v1", "deviceclasses")
EXTENDED_RESOURCE_CLAIM: Final = "resource.kubernetes.io/extended-resource-claim"
"""The annotation (value "true") kube-scheduler puts on the claim it makes for a pod's extended-resource request
satisfied by DRA devices. Such a claim's devices are already counted as the pod's request."""
MAX_DEVICES: Final = 1024
"""More devices than any slice holds (the API allows 128 per slice; a DGX with 8 GPUs publishes a few hundred
partitions): a larger count is refused rather than expanded."""

Kind = Literal["gpu", "mig"]
Counters = tuple[tuple[str, int], ...]
"""(counter, amount), sorted: what a device consumes from one counter set, or what a set holds."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One device of NVIDIA's driver: a whole GPU or a MIG device."""

    name: str
    kind: Kind
    product: str
    """The GPU's `productName` (`NVIDIA A100-SXM4-40GB`)."""
    profile: str
    """The MIG profile (`1g.5gb`); empty for a whole GPU."""
    physical: str
    """The physical GPU it is on: its own `uuid` for a GPU, `parentUUID` for a MIG device, else its counter set,
    else its name. Devices with the same value share one GPU."""
    memory: int
    """Its `memory` capacity, in bytes (0 when not published)."""
    consumes: tuple[tuple[str, Counters], ...] = ()
    """(counter set, counters) it takes while allocated: only partitionable devices consume counters."""
    gpu_uuid: str = ""
    """The UUID of the physical GPU it is on (`uuid`, `parentUUID` for a MIG device), as DCGM's `UUID` label
    writes it; empty when the driver publishes none."""

    @property
    def resource(self) -> str:
        """The extended resource a device plugin would advertise it as."""
        return contract.RESOURCE_GPU if self.kind == "gpu" else contract.mig_resource(self.profile)


@dataclass(frozen=True, slots=True)
class DriverSlice:
    """What one ResourceSlice of NVIDIA's driver publishes for one node."""

    name: str
    node: str
    pool: str
    generation: int
    devices: tuple[GpuDevice, ...] = ()
    counter_sets: tuple[tuple[str, Counters], ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimDevices:
    """The devices of NVIDIA's driver one ResourceClaim holds."""

    key: str
    """`namespace/name`."""
    devices: tuple[tuple[str, str], ...]
    """(pool, device) of each allocated device of `DRIVER`."""
    extended: bool
    """Made by kube-scheduler for an extended-resource request (counted as the pod's request, not again)."""
    pods: tuple[str, ...] = ()
    """UIDs of the pods it is reserved for."""


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list")
    return value


def _name(obj: Any, kind: str) -> tuple[Mapping[str, Any], str]:
    meta = json_object(obj.get("metadata") if isinstance(obj, dict) else None, f"{kind}.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} without metadata.name")
    return meta, name


def _attribute(attributes: Mapping[str, Any], key: str) -> str:
    """A string or version attribute, by its bare name or qualified with the driver's domain ("" when absent)."""
    value = attributes.get(key, attributes.get(f"{DRIVER}/{key}"))
    if not isinstance(value, dict):
        return ""
    text = value.get("string", value.get("version"))
    return text if isinstance(text, str) else ""


def _counters(value: Any, where: str) -> Counters:
    counters: dict[str, int] = {}
    for name, counter in json_object(value, where).items():
        amount = json_object(counter, f"{where}.{name}").get("value")
        if not isinstance(amount, (str, int, float)):
            raise ValueError(f"{where}.{name}.value is missing")
        try:
            counters[str(name)] = int(parse_quantity(amount))
        except QuantityError as exc:
            raise ValueError(f"{where}.{name}.value: {exc}") from exc
    return tuple(sorted(counters.items()))


def _device(raw: Any, where: str) -> GpuDevice | None:
    """A GPU or MIG device; None for the driver's other device types (a VFIO GPU, say)."""
    device = json_object(raw, where)
    name = device.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name is missing")
    attributes = json_object(device.get("attributes"), f"{where}.attributes")
    kind = _attribute(attributes, "type")
    if kind not in ("gpu", "mig"):
        return None
    profile = _attribute(attributes, "profile")
    if kind == "mig" and not profile:
        raise ValueError(f"{where} ({name}): a MIG device without the profile attribute")
    memory_raw = json_object(
        json_object(device.get("capacity"), f"{where}.capacity").get("memory"), f"{where}.capacity.memory"
    )
    try:
        memory = int(parse_quantity(memory_raw["value"])) if "value" in memory_raw else 0
    except QuantityError as exc:
        raise ValueError(f"{where}.capacity.memory.value: {exc}") from exc
    consumes = tuple(
        (
            str(json_object(c, f"{where}.consumesCounters[{i}]").get("counterSet") or ""),
            _counters(c.get("counters"), f"{where}.consumesCounters[{i}].counters"),
        )
        for i, c in enumerate(_list(device.get("consumesCounters"), f"{where}.consumesCounters"))
    )
    own = _attribute(attributes, "uuid" if kind == "gpu" else "parentUUID")
    physical = own or (consumes[0][0] if consumes else "") or name
    typed: Kind = "gpu" if kind == "gpu" else "mig"
    product = _attribute(attributes, "productName")
    return GpuDevice(name, typed, product, profile, physical, memory, consumes, own)


def slice_from_json(obj: Any) -> DriverSlice | None:
    """The GPUs one ResourceSlice publishes; None for another driver's slice or one not bound to a node. Raises
    ValueError naming the slice and the field that cannot be read."""
    _, name = _name(obj, "ResourceSlice")
    spec = json_object(obj.get("spec"), f"ResourceSlice {name}: spec")
    if spec.get("driver") != DRIVER:
        return None
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return None  # network-attached devices (nodeSelector, allNodes) are not a node's GPUs
    pool = json_object(spec.get("pool"), f"ResourceSlice {name}: spec.pool")
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise ValueError(f"ResourceSlice {name}: spec.pool.generation must be an integer")
    raw_devices = _list(spec.get("devices"), f"ResourceSlice {name}: spec.devices")
    if len(raw_devices) > MAX_DEVICES:
        raise ValueError(f"ResourceSlice {name}: {len(raw_devices)} devices, more than any slice holds")
    devices = tuple(
        d for i, raw in enumerate(raw_devices) if (d := _device(raw, f"ResourceSlice {name}: spec.devices[{i}]"))
    )
    sets = tuple(
        (
            str(json_object(s, f"ResourceSlice {name}: spec.sharedCounters[{i}]").get("name") or ""),
            _counters(s.get("counters"), f"ResourceSlice {name}: spec.sharedCounters[{i}].counters"),
        )
        for i, s in enumerate(_list(spec.get("sharedCounters"), f"ResourceSlice {name}: spec.sharedCounters"))
    )
    return DriverSlice(name, node, str(pool.get("name") or node), generation, devices, sets)


def claim_from_json(obj: Any) -> ClaimDevices:
    """The devices of NVIDIA's driver a ResourceClaim holds (none while it is not allocated). Raises ValueError
    naming the claim and the field that cannot be read."""
    meta, name = _name(obj, "ResourceClaim")
    where = f"ResourceClaim {meta.get('namespace', '')}/{name}"
    status = json_object(obj.get("status"), f"{where}: status")
    allocation = json_object(status.get("allocation"), f"{where}: status.allocation")
    results = _list(json_object(allocation.get("devices"), f"{where}: status.allocation.devices").get("results"), where)
    devices: list[tuple[str, str]] = []
    for i, raw in enumerate(results):
        result = json_object(raw, f"{where}: status.allocation.devices.results[{i}]")
        if result.get("driver") != DRIVER:
            continue
        pool, device = result.get("pool"), result.get("device")
        if not isinstance(pool, str) or not isinstance(device, str) or not pool or not device:
            raise ValueError(f"{where}: status.allocation.devices.results[{i}] without pool or device")
        devices.append((pool, device))
    annotations = json_object(meta.get("annotations"), f"{where}: metadata.annotations")
    pods = tuple(
        str(r.get("uid") or "")
        for r in _list(status.get("reservedFor"), f"{where}: status.reservedFor")
        if isinstance(r, dict) and r.get("resource") == "pods"
    )
    return ClaimDevices(
        f"{meta.get('namespace', '')}/{name}",
        tuple(devices),
        annotations.get(EXTENDED_RESOURCE_CLAIM) == "true",
        pods,
    )


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """Every GPU device the driver publishes for one node (its pool's slices together)."""

    node: str
    devices: tuple[GpuDevice, ...]
    counter_sets: Mapping[str, Counters] = field(default_factory=dict)

    @property
    def product(self) -> str:
        """The product name of its GPUs (the first device's: a node has one model)."""
        return next((d.product for d in self.devices if d.product), "")

    @property
    def gpu_memory(self) -> int:
        """One whole GPU's memory in bytes (0 when no whole-GPU device says)."""
        return max((d.memory for d in self.devices if d.kind == "gpu"), default=0)

    @property
    def physical_gpus(self) -> int:
        """Physical GPUs: distinct GPUs that devices are on."""
        return len({d.physical for d in self.devices})

    @property
    def partitionable(self) -> bool:
        """Whether its devices are carved from shared counters (dynamic MIG) rather than fixed."""
        return any(d.consumes for d in self.devices)

    def offered(self, allocated: Collection[str] = ()) -> dict[str, int]:
        """What the node's devices amount to as extended resources, given the devices (names) claims hold.

        Fixed devices count one each, held or not (a pod's request says which are in use). Partitionable devices
        count, per resource, the held ones plus the most further instances that fit what the held ones leave of
        the counters (a free 7-slice A100 offers seven `1g.5gb` and one whole GPU, not both; with one `1g.5gb`
        held, six more and no whole GPU): a pod asks for one resource, and kube-scheduler's allocator, which sees
        the counters, has already dropped a node where the partition it needs can no longer be carved."""
        offered: dict[str, int] = {}
        by_resource: dict[str, list[GpuDevice]] = {}
        left = {name: dict(counters) for name, counters in self.counter_sets.items()}
        held = set(allocated)
        for device in self.devices:
            if not device.consumes:
                offered[device.resource] = offered.get(device.resource, 0) + 1
            elif device.name in held:
                offered[device.resource] = offered.get(device.resource, 0) + 1
                _take(device.consumes, left)
            else:
                by_resource.setdefault(device.resource, []).append(device)
        for resource, devices in by_resource.items():
            free = {name: dict(counters) for name, counters in left.items()}
            fitted = 0
            for device in devices:
                if _fits(device.consumes, free):
                    _take(device.consumes, free)
                    fitted += 1
            offered[resource] = offered.get(resource, 0) + fitted
        return offered


def _take(consumes: tuple[tuple[str, Counters], ...], left: dict[str, dict[str, int]]) -> None:
    for counter_set, counters in consumes:
        for counter, amount in counters:
            if counter_set in left:
                left[counter_set][counter] = left[counter_set].get(counter, 0) - amount


def _fits(consumes: tuple[tuple[str, Counters], ...], left: Mapping[str, Mapping[str, int]]) -> bool:
    return all(
        counter_set in left and left[counter_set].get(counter, 0) >= amount
        for counter_set, counters in consumes
        for counter, amount in counters
    )


def node_gpus(node: str, slices: Iterable[DriverSlice]) -> NodeGpus:
    """A node's GPUs from its slices. Only the newest generation of a pool counts, as kube-scheduler does: a
    driver replacing its slices publishes the new generation before it deletes the old one."""
    slices = list(slices)
    newest: dict[str, int] = {}
    for one in slices:
        newest[one.pool] = max(newest.get(one.pool, one.generation), one.generation)
    current = [s for s in sorted(slices, key=lambda s: s.name) if s.generation == newest[s.pool]]
    return NodeGpus(
        node,
        tuple(d for s in current for d in s.devices),
        {name: counters for s in current for name, counters in s.counter_sets},
    )


def held_resources(claim: ClaimDevices, devices: Mapping[tuple[str, str], GpuDevice]) -> dict[str, dict[str, int]]:
    """Per node (pool), the extended resources a claim's devices amount to; devices no slice publishes are left out
    (the caller logs them)."""
    held: dict[str, dict[str, int]] = {}
    for pool, name in claim.devices:
        device = devices.get((pool, name))
        if device is not None:
            on = held.setdefault(pool, {})
            on[device.resource] = on.get(device.resource, 0) + 1
    return held


def node_with_gpus(node: Mapping[str, Any], gpus: NodeGpus | None) -> Mapping[str, Any]:
    """A Node object whose `status.allocatable` also lists its DRA GPUs as the extended resources they amount to
    (`NodeGpus.offered`), with GPU Feature Discovery's product, count and memory labels where it has none: the
    report and the planners read Node objects as the device plugin and GFD fill them. The node itself when it has
    no DRA GPUs, or when its allocatable cannot be read (the reader of Node objects then names the field)."""
    if gpus is None or not gpus.devices:
        return node
    status = node.get("status")
    status = status if isinstance(status, dict) else {}
    allocatable = _plus(status.get("allocatable"), gpus.offered())
    if allocatable is None:
        return node
    meta = node.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    labels = dict(meta["labels"]) if isinstance(meta.get("labels"), dict) else {}
    if gpus.product:
        labels.setdefault(GFD_PRODUCT, gpus.product.replace(" ", "-"))
    labels.setdefault(GFD_COUNT, str(gpus.physical_gpus))
    if gpus.gpu_memory:
        labels.setdefault(GFD_MEMORY, str(gpus.gpu_memory >> 20))
    return {**node, "metadata": {**meta, "labels": labels}, "status": {**status, "allocatable": allocatable}}


T = TypeVar("T")


def _readable(raws: Iterable[Any], read: Callable[[Any], T], kind: str) -> Iterator[T]:
    """Each raw object read by `read`; one it refuses (ValueError, naming the object and field) is skipped and
    logged, so a malformed object costs its own GPUs only, never the whole listing's."""
    for raw in raws:
        try:
            yield read(raw)
        except ValueError as exc:
            log.warning("skipping a malformed %s: %s", kind, exc)


def held_by_pod(claims: Iterable[Any], gpus: Mapping[str, NodeGpus]) -> dict[str, dict[str, int]]:
    """Per pod UID, the extended resources that the driver's devices of the claims reserved for it amount to.

    Claims kube-scheduler made for an extended-resource request are left out (the pod's request says it already),
    and so are devices no slice publishes; a malformed claim is skipped, logged with the reason. A claim several
    pods share counts once, for the first pod it is reserved for: the others use the same device, and counting it
    per pod would count GPUs the cluster does not have."""
    devices = {(node, d.name): d for node, found in gpus.items() for d in found.devices}
    held: dict[str, dict[str, int]] = {}
    for claim in _readable(claims, claim_from_json, "ResourceClaim"):
        owner = next((uid for uid in claim.pods if uid), None)
        if claim.extended or not claim.devices or owner is None:
            continue
        mine = held.setdefault(owner, {})
        for on in held_resources(claim, devices).values():
            for resource, count in on.items():
                mine[resource] = mine.get(resource, 0) + count
    return held


def _plus(values: Any, counts: Mapping[str, int]) -> dict[str, Any] | None:
    """A resource list (`allocatable`, `requests`) with `counts` added; None when it is not an object or a value
    it already has for one of them cannot be read."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        return None
    out = dict(values)
    for resource, count in counts.items():
        try:
            have = int(parse_quantity(out.get(resource, 0)))
        except QuantityError:
            return None
        out[resource] = str(have + count)
    return out


def pod_with_devices(pod: Mapping[str, Any], held: Mapping[str, int] | None) -> Mapping[str, Any]:
    """A Pod object whose container that uses its claims (`resources.claims`, else the first) also requests and
    limits, as extended resources, the devices its claims hold (`held_by_pod`): the report reads a pod's GPUs from
    its requests, as the device plugin would have them. The pod itself when its claims hold none, or when that
    container cannot be read (the report's reader then says what is wrong with it)."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not held or not isinstance(spec, dict) or not isinstance(containers, list) or not containers:
        return pod

    def uses_claims(container: Any) -> bool:
        resources = container.get("resources") if isinstance(container, dict) else None
        return isinstance(resources, dict) and bool(resources.get("claims"))

    at = next((i for i, c in enumerate(containers) if uses_claims(c)), 0)
    container = containers[at]
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(container, dict) or not isinstance(resources, dict | None):
        return pod
    resources = resources or {}
    requests, limits = _plus(resources.get("requests"), held), _plus(resources.get("limits"), held)
    if requests is None or limits is None:
        return pod
    changed = [*containers]
    changed[at] = {**container, "resources": {**resources, "requests": requests, "limits": limits}}
    return {**pod, "spec": {**spec, "containers": changed}}


def nodes_by_uuid(gpus: Mapping[str, NodeGpus]) -> dict[str, str]:
    """The node of each physical GPU whose UUID the driver publishes. DCGM labels every series with its GPU's UUID,
    so a series is a DRA node's whatever its host label says (the exporter's pod name where NODE_NAME is unset)."""
    return {d.gpu_uuid: node for node, found in gpus.items() for d in found.devices if d.gpu_uuid}


def gpus_by_node(slices: Iterable[Any]) -> dict[str, NodeGpus]:
    """Each node's GPUs from raw ResourceSlices; malformed slices are skipped, logged with the reason."""
    published: dict[str, list[DriverSlice]] = {}
    for one in _readable(slices, slice_from_json, "ResourceSlice"):
        if one is not None:
            published.setdefault(one.node, []).append(one)
    return {node: node_gpus(node, found) for node, found in published.items()}
