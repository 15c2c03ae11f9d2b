"""What a raw Kubernetes object is, in the few ways gpupack asks: finished, a StatefulSet's, on spot, using a GPU.

The extender, the report, the savings replay and the planner read pods and nodes as JSON (the client's lists and
watches, `kubectl get -o json` files); each asks these predicates and none writes its own: three versions of
"is this a StatefulSet pod" had disagreed. The webhook reads a typed pod (`gpupack.core.k8s.Pod`) and applies
the same rules to it. This module also owns the labels that GPU Feature Discovery and the NVIDIA MIG manager put
on nodes (docs/platform/nvidia.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from gpupack.core import contract

if TYPE_CHECKING:
    from gpupack.core.gpus.catalog import GpuModel

GFD_PRODUCT: Final = "nvidia.com/gpu.product"
"""The GPU model, `NVIDIA-A100-SXM4-40GB`; `-SHARED` is appended on time-sliced nodes."""
GFD_COUNT: Final = "nvidia.com/gpu.count"
"""Physical GPUs on the node."""
GFD_MEMORY: Final = "nvidia.com/gpu.memory"
"""Memory of one GPU, MiB."""
GFD_REPLICAS: Final = "nvidia.com/gpu.replicas"
"""Time-sliced replicas per GPU (1 without sharing)."""
GFD_SHARING_STRATEGY: Final = "nvidia.com/gpu.sharing-strategy"
"""`none`, `time-slicing` or `mps`."""
GFD_MIG_CAPABLE: Final = "nvidia.com/mig.capable"
"""`true` on a node whose GPUs can run MIG."""
GFD_MIG_STRATEGY: Final = "nvidia.com/mig.strategy"
"""`single` or `mixed` (gpupack reads the `mixed` resources, `nvidia.com/mig-<profile>`)."""
MIG_CONFIG: Final = "nvidia.com/mig.config"
"""The MIG layout the MIG manager applies to the node: a name from its mig-parted config."""
MIG_CONFIG_STATE: Final = "nvidia.com/mig.config.state"
"""The MIG manager's progress: `pending`, `rebooting`, `success` or `failed`."""
PARTITIONING_LABELS: Final = (MIG_CONFIG, GFD_MIG_STRATEGY, GFD_REPLICAS, GFD_SHARING_STRATEGY)
"""The labels only a node whose GPUs are partitioned (MIG) or time-sliced carries."""

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""Pod phases that hold no resources: the kubelet has stopped every container for good."""
STATEFULSET: Final = "StatefulSet"
DAEMONSET: Final = "DaemonSet"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod has Succeeded or Failed: it holds no GPU and no node capacity any more."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in FINISHED_PHASES


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference with `controller: true`, if any: the object that manages this one.

    Only the controller counts. An object may list other owners (garbage collection only), and Cluster Autoscaler
    also decides by the controller reference (kubernetes/autoscaler `utils/drain`, docs/platform/cluster-autoscaler.md).
    """
    refs = _metadata(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def controller_kind(obj: Mapping[str, Any]) -> str | None:
    """The kind of the object's controller (`StatefulSet`, `ReplicaSet`, `Job`...), if any."""
    ref = controller_of(obj)
    kind = ref.get("kind") if ref is not None else None
    return kind if isinstance(kind, str) else None


def is_statefulset_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a StatefulSet controls the pod: it keeps state, so it never goes to spot."""
    return controller_kind(pod) == STATEFULSET


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a DaemonSet controls the pod (Cluster Autoscaler does not drain those)."""
    return controller_kind(pod) == DAEMONSET


def priority_of(pod: Mapping[str, Any]) -> int:
    """The pod's `spec.priority`, 0 when absent or not an integer.

    The API server's Priority admission plugin resolves it from `priorityClassName` (or the global default
    class) before any webhook runs; a pod without one is treated as priority 0 by kube-scheduler
    (`corev1helpers.PodPriority`), so preemption and the scheduling queue order it there too."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def timestamp(text: Any) -> float | None:
    """An RFC 3339 time as the API server writes it (`2026-12-01T10:00:00Z`, `...00.123456Z`) in seconds since the
    epoch, None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp()


def started_at(pod: Mapping[str, Any]) -> float | None:
    """When the kubelet started the pod (`status.startTime`), seconds since the epoch; None when it has not."""
    status = pod.get("status")
    return timestamp(status.get("startTime")) if isinstance(status, Mapping) else None


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """`metadata.labels`, empty when absent or malformed."""
    found = _metadata(obj).get("labels")
    return found if isinstance(found, dict) else {}


def names_gpu(resources: Iterable[Any], shared_resource: str = contract.RESOURCE_GPU_SHARED) -> bool:
    """Whether any of these resource names is a GPU (whole, time-sliced or MIG; `contract.is_gpu_resource`)."""
    return any(isinstance(name, str) and contract.is_gpu_resource(name, shared_resource) for name in resources)


def uses_gpu(pod: Mapping[str, Any], shared_resource: str = contract.RESOURCE_GPU_SHARED) -> bool:
    """Whether a container or an init container of the pod requests or limits a GPU resource."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    for field in ("containers", "initContainers"):
        containers = spec.get(field)
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for table in (resources.get("requests"), resources.get("limits")):
                if isinstance(table, Mapping) and names_gpu(table, shared_resource):
                    return True
    return False


def gfd_labels(model: GpuModel, gpus: int, *, shared: bool = False) -> dict[str, str]:
    """The labels GPU Feature Discovery gives a node of `gpus` GPUs of `model` (one the catalog has a product
    name for): product (with `-SHARED` when time-sliced), count and memory. The demo and the synthetic day build
    their nodes with it, so the extender reads them as it reads a real node."""
    if model.product is None or model.memory_mib is None:
        raise ValueError(f"the catalog has no GFD product name for {model.name}")
    product = f"{model.product}-SHARED" if shared else model.product
    return {GFD_PRODUCT: product, GFD_COUNT: str(gpus), GFD_MEMORY: str(model.memory_mib)}


def json_object(value: Any, where: str) -> Mapping[str, Any]:
    """`value` as an object field of a raw object: empty when absent (null), ValueError naming `where` when it is
    anything but an object."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value
