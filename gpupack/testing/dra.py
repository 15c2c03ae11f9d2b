"""ResourceSlices and DeviceClasses as NVIDIA's DRA driver publishes them (docs/platform/dra.md), for the tests.

The shapes follow the driver (`NVIDIA/k8s-dra-driver-gpu`, `cmd/gpu-kubelet-plugin/deviceinfo.go` and `mig.go`,
and its chart's DeviceClasses): driver `gpu.nvidia.com`, one pool per node named after it, a whole GPU named
`gpu-<minor>` with attributes `type`, `uuid`, `productName`, `brand`, `architecture`, `cudaComputeCapability`,
`driverVersion` and capacity `memory`; a MIG device named `gpu-<minor>-mig-<profile without dots>-<profile id>-<start>`
with `type: mig`, `parentUUID`, `profile` and the parent's product, and its own `memory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupack.core.dra import DRIVER
from gpupack.core.gpus.catalog import MODELS, profile_of
from gpupack.core.gpus.geometry import place
from gpupack.testing.dcgm import gpu_uuid

PROFILE_IDS = {"1g.5gb": 19, "1g.10gb": 15, "2g.10gb": 14, "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0,
               "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}  # fmt: skip
"""NVML's profile ids in the MIG device names (NVIDIA MIG User Guide, "Supported MIG Profiles")."""
PRODUCTS = {
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0", 40960),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", "Ampere", "8.0", 81920),
    "H100-80GB": ("NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81559),
    "L40S": ("NVIDIA L40S", "Ada Lovelace", "8.9", 46068),
}
"""productName, architecture, compute capability and memory (MiB) as NVML reports them."""


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _common(model: str) -> dict[str, Any]:
    product, architecture, capability, _ = PRODUCTS[model]
    return {
        "productName": _string(product),
        "brand": _string("Nvidia"),
        "architecture": _string(architecture),
        "cudaComputeCapability": {"version": f"{capability}.0"},
        "driverVersion": {"version": "570.133.20"},
        "cudaDriverVersion": {"version": "12.8.0"},
    }


def uuid(node: str, minor: int) -> str:
    """The GPU's UUID: the one the test exporter writes on its series (`testing.dcgm.gpu_uuid`), as the driver and
    DCGM read the same UUID from NVML."""
    return gpu_uuid(node, minor)


def whole_gpu(node: str, model: str, minor: int) -> dict[str, Any]:
    """One whole-GPU device."""
    return {
        "name": f"gpu-{minor}",
        "attributes": {"type": _string("gpu"), "uuid": _string(uuid(node, minor)), **_common(model)},
        "capacity": {"memory": {"value": f"{PRODUCTS[model][3]}Mi"}},
    }


def mig_device(node: str, model: str, minor: int, profile: str, start: int) -> dict[str, Any]:
    """One MIG device carved from GPU `minor` at memory slice `start`."""
    found = profile_of(model, profile)
    if found is None:
        raise ValueError(f"{model} has no MIG profile {profile}")
    memory_mib = PRODUCTS[model][3] * found.memory_slices // MODELS[model].memory_slices
    return {
        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{PROFILE_IDS[profile]}-{start}",
        "attributes": {
            "type": _string("mig"),
            "uuid": _string(f"MIG-{uuid(node, minor)[4:]}-{start}"),
            "parentUUID": _string(uuid(node, minor)),
            "profile": _string(profile),
            **_common(model),
        },
        "capacity": {
            "memory": {"value": f"{memory_mib}Mi"},
            "multiprocessors": {"value": str(found.compute_slices * 14)},
        },
    }


def resource_slice(node: str, devices: Sequence[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    """The node's slice: one pool named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def gpu_slice(node: str, model: str, count: int) -> dict[str, Any]:
    """A node of `count` whole GPUs."""
    return resource_slice(node, [whole_gpu(node, model, i) for i in range(count)])


def mig_slice(node: str, model: str, layouts: Sequence[dict[str, int]]) -> dict[str, Any]:
    """A node whose GPUs are carved into fixed MIG devices, one layout (profile -> count) per GPU, as
    mig-parted leaves them and the driver publishes them (without the parent GPU)."""
    devices: list[dict[str, Any]] = []
    for minor, layout in enumerate(layouts):
        placement = place(model, layout)
        if placement is None:
            raise ValueError(f"{layout} does not fit one {model}")
        devices += [mig_device(node, model, minor, profile, start) for profile, start in placement]
    return resource_slice(node, devices)


def device_class(
    name: str, kind: str, extended_resource: str | None = None, profile: str | None = None
) -> dict[str, Any]:
    """A DeviceClass selecting the driver's devices of `kind` (and `profile`), as the driver's chart writes them;
    with `extended_resource`, kube-scheduler satisfies that extended resource from the class's devices."""
    expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
    if profile:
        expression += f" && device.attributes['{DRIVER}'].profile == '{profile}'"
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def driver_classes() -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's chart installs: `gpu.nvidia.com` (serving `nvidia.com/gpu`) and `mig.nvidia.com`."""
    return [
        device_class("gpu.nvidia.com", "gpu", "nvidia.com/gpu"),
        device_class("mig.nvidia.com", "mig"),
    ]


def partitionable_slices(node: str, model: str, gpus: int) -> list[dict[str, Any]]:
    """A node whose GPUs are partitioned on demand (dynamic MIG, `DRAPartitionableDevices`), as the driver's
    `partitions.go` publishes them: per GPU a counter set of its memory slices (`memory-slice-<i>`, in a slice of its
    own: a v1.36 slice holds devices or counter sets, not both), and as devices the whole GPU and every placement of
    every profile, each consuming the memory slices it spans."""
    slices = MODELS[model].memory_slices
    devices: list[dict[str, Any]] = []
    counter_sets: list[dict[str, Any]] = []
    for minor in range(gpus):
        counter_set = f"gpu-{minor}-counter-set"
        counter_sets.append(
            {"name": counter_set, "counters": {f"memory-slice-{i}": {"value": "1"} for i in range(slices)}}
        )

        def consumes(start: int, span: int, counter_set: str = counter_set) -> list[dict[str, Any]]:
            counters = {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + span)}
            return [{"counterSet": counter_set, "counters": counters}]

        devices.append({**whole_gpu(node, model, minor), "consumesCounters": consumes(0, slices)})
        for profile in MODELS[model].profiles:
            for start in profile.starts:
                device = mig_device(node, model, minor, profile.name, start)
                devices.append({**device, "consumesCounters": consumes(start, profile.memory_slices)})
    with_devices = resource_slice(node, devices)
    with_counters = resource_slice(node, [])
    with_counters["metadata"]["name"] = f"{node}-{DRIVER}-counters"
    del with_counters["spec"]["devices"]
    with_counters["spec"]["sharedCounters"] = counter_sets
    for one in (with_devices, with_counters):
        one["spec"]["pool"]["resourceSliceCount"] = 2
    return [with_devices, with_counters]


def allocated_claim(
    name: str, devices: Sequence[tuple[str, str]], extended: bool = False, driver: str = DRIVER, namespace: str = "ml"
) -> dict[str, Any]:
    """A ResourceClaim as kube-scheduler leaves it once allocated: (pool, device) of each result, reserved for one pod;
    `extended`: made by kube-scheduler for a pod's extended-resource request (its annotation)."""
    annotations = {"resource.kubernetes.io/extended-resource-claim": "true"} if extended else {}
    results = [{"request": "gpu", "driver": driver, "pool": pool, "device": device} for pool, device in devices]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"uid-{name}"}],
        },
    }
