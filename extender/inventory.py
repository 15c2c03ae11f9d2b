"""What a node offers: its GPU resources, GPU model, spot flag and taints, read from a Node object.

Only these few fields are kept, in a slotted record, instead of the client's generated model objects: the
extender holds every node of the cluster, and the scheduler may send full Node objects on every call.
GPU Feature Discovery labels say which GPU model a node has; the MIG profile names it advertises say it too
when the labels are missing (`1g.5gb` only exists on the A100-40GB).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpupack.core import contract
from gpupack.core.dra import NodeGpus
from gpupack.core.gpus.catalog import memory_share, mig_model_of
from gpupack.core.objects import GFD_COUNT, GFD_MEMORY, GFD_PRODUCT, GFD_REPLICAS, MIG_CONFIG, json_object
from gpupack.core.policy import Policy
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.core.spot import spot_label

CPU = "cpu"
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node as the extender sees it. Resource amounts are integers: millicores, bytes, device counts."""

    name: str
    allocatable: Mapping[str, int]
    """GPU resources (`nvidia.com/*`), plus `cpu` in millicores and `memory` in bytes."""
    spot: str
    """The recognised spot label it carries, `key=value` (`policy.spot.recognised`); empty on other nodes."""
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect) of each taint."""
    product: str
    gpu_model: str | None
    """Key of the MIG catalog (`A100-40GB`...) when known: it fixes each profile's share of a GPU."""
    gpu_count: int
    """Physical GPUs: the GFD label, else derived from the resources."""
    replicas: int
    """Time-sliced replicas per GPU (1 without time-slicing)."""
    mig_config: str
    shares: Mapping[str, float]
    """How much of one physical GPU one unit of each GPU resource is (see `gpu_share`)."""
    gpu_capacity: float
    """Physical GPUs' worth of GPU resources the node offers."""
    unschedulable: bool = False

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        """The GPU resources the node advertises with a count above zero."""
        return tuple(r for r in self.shares if self.allocatable[r] > 0)


def gpu_share(gpu_model: str | None, replicas: int, resource: str) -> float:
    """How much of one physical GPU one unit of `resource` is: 1 for a whole GPU, 1/replicas for a
    time-sliced replica, a MIG instance's share of its GPU's memory slices (`catalog.memory_share`: an A30
    `4g.24gb` is a whole GPU, an A100 `3g.20gb` half of one; 1/7 when the profile is unknown)."""
    if resource.startswith(contract.RESOURCE_MIG_PREFIX):
        return memory_share(resource.removeprefix(contract.RESOURCE_MIG_PREFIX), gpu_model)
    if resource == contract.RESOURCE_GPU:
        return 1.0
    return 1 / max(replicas, 1)


MAX_NODE_GPUS = 1024
"""More GPUs than any node has (a DGX has 8 or 16; 8 GPUs in 7 MIG slices each are 56 `nvidia.com/gpu`): a count
above it is a broken label or allocatable, refused rather than turned into a million-slot GPU layout."""


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    """An integer label, None when absent or not a non-negative integer string."""
    value = labels.get(key)
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 9:
        return None
    return int(value)


def _amount(resource: str, text: Any) -> int:
    """Millicores for cpu, integers otherwise; 0 for anything unparsable (a broken node offers nothing)."""
    try:
        value = parse_quantity(text)
    except QuantityError:
        return 0
    return int(value * 1000) if resource == CPU else int(value)


def node_from_json(node: Mapping[str, Any], policy: Policy) -> NodeRecord:
    """A NodeRecord from a Node object (as JSON). Raises ValueError naming the node and the field when it has no
    name, a part of the wrong JSON type, or an impossible GPU count."""
    meta = node.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ValueError("node without metadata.name")
    name: str = meta["name"]
    labels = json_object(meta.get("labels"), f"node {name}: metadata.labels")
    spec = json_object(node.get("spec"), f"node {name}: spec")
    allocatable_raw = json_object(
        json_object(node.get("status"), f"node {name}: status").get("allocatable"), f"node {name}: status.allocatable"
    )
    taints_raw = spec.get("taints") or []
    if not isinstance(taints_raw, list):
        raise ValueError(f"node {name}: spec.taints must be a list")
    allocatable = {
        r: _amount(r, v)
        for r, v in allocatable_raw.items()
        if r in (CPU, MEMORY) or contract.is_gpu_resource(r, policy.time_slicing.resource_name)
    }
    mig_names = {
        r.removeprefix(contract.RESOURCE_MIG_PREFIX) for r in allocatable if r.startswith(contract.RESOURCE_MIG_PREFIX)
    }
    product = str(labels.get(GFD_PRODUCT, ""))
    model = mig_model_of(product, _int_label(labels, GFD_MEMORY), mig_names)
    replicas = _int_label(labels, GFD_REPLICAS) or 1
    shared = allocatable.get(policy.time_slicing.resource_name, 0)
    derived = allocatable.get(contract.RESOURCE_GPU, 0) + -(-shared // replicas)
    taints = tuple(
        (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in taints_raw
        if isinstance(t, dict)
    )
    labelled = _int_label(labels, GFD_COUNT)
    if labelled is not None and labelled > MAX_NODE_GPUS:
        raise ValueError(f"node {name}: {GFD_COUNT}={labelled} is more GPUs than a node has (at most {MAX_NODE_GPUS})")
    # Without the label the count comes from the devices advertised, which for time-slicing without a replicas
    # label are replicas, not GPUs: capped rather than refused, since the node itself may be fine.
    gpu_count = labelled or min(derived, MAX_NODE_GPUS)
    shares = {r: gpu_share(model, replicas, r) for r in allocatable if r not in (CPU, MEMORY)}
    return NodeRecord(
        name=name,
        allocatable=allocatable,
        spot=spot_label(labels, policy.spot.recognised) or "",
        taints=taints,
        product=product,
        gpu_model=model,
        gpu_count=gpu_count,
        replicas=replicas,
        mig_config=str(labels.get(MIG_CONFIG, "")),
        shares=shares,
        gpu_capacity=sum(allocatable[r] * share for r, share in shares.items()),
        unschedulable=bool(spec.get("unschedulable")),
    )


def with_gpus(record: NodeRecord, gpus: NodeGpus | None, held: Collection[str] = ()) -> NodeRecord:
    """`record` with the GPUs a DRA driver publishes for the node (`gpupack.core.dra`), as the extended resources a
    device plugin would advertise: placement and fragmentation then treat DRA and device-plugin nodes alike.
    The node's own labels win where they say the same thing (GFD's product and count). A partitionable node's
    capacity is its physical GPUs: the partitions it offers are alternatives, not all at once; `held`, the devices
    claims hold there, says which partitions are carved and what is left to carve (`NodeGpus.offered`)."""
    if gpus is None or not gpus.devices:
        return record
    offered = gpus.offered(held)
    allocatable = dict(record.allocatable)
    for resource, count in offered.items():
        allocatable[resource] = allocatable.get(resource, 0) + count
    product = record.product or gpus.product
    mig_names = {
        r.removeprefix(contract.RESOURCE_MIG_PREFIX) for r in allocatable if r.startswith(contract.RESOURCE_MIG_PREFIX)
    }
    model = record.gpu_model or mig_model_of(product, gpus.gpu_memory >> 20 or None, mig_names)
    shares = {r: gpu_share(model, record.replicas, r) for r in allocatable if r not in (CPU, MEMORY)}
    gpu_count = min(max(record.gpu_count, gpus.physical_gpus), MAX_NODE_GPUS)
    capacity = float(gpu_count) if gpus.partitionable else sum(allocatable[r] * share for r, share in shares.items())
    return replace(
        record,
        allocatable=allocatable,
        product=product,
        gpu_model=model,
        gpu_count=gpu_count,
        shares=shares,
        gpu_capacity=capacity,
    )
