"""Builders of the cluster objects and usage the report's tests judge: nodes, pods with owners, volumes and
annotations, PodDisruptionBudgets, and GPUs over a window."""

from __future__ import annotations

from typing import Any

from gpupack.core.policy import Policy, parse_policy
from gpupack.core.thresholds import Thresholds
from gpupack.report.cluster import Cluster, from_objects
from gpupack.report.findings import Inputs
from gpupack.report.usage import GpuUsage, Usage, Window

WEEK = Window(1_795_000_000.0, 1_795_000_000.0 + 7 * 86400)
A100 = "NVIDIA A100-SXM4-40GB"
MIG_RESOURCES = {"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.20gb": "2"}


def node(
    name: str, gpus: int = 8, spot: bool = False, annotations: dict[str, str] | None = None, **extra: str
) -> dict[str, Any]:
    """A GPU node with `gpus` whole GPUs (and, with `mig`, MIG instances) in its allocatable."""
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    if spot:
        labels["node-type"] = "spot"
    allocatable = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), **extra}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "status": {"allocatable": allocatable},
    }


def pod(
    name: str,
    node_name: str,
    gpu: dict[str, str] | None = None,
    namespace: str = "ml",
    owner: str | None = "ReplicaSet",
    owner_name: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    requests: dict[str, str] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """A running pod; by default owned by a ReplicaSet of a Deployment `name` minus its last part."""
    found_labels = dict(labels or {})
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": found_labels}
    if annotations:
        metadata["annotations"] = annotations
    if owner is not None:
        base = name.rsplit("-", 2)[0]
        if owner == "ReplicaSet":
            found_labels.setdefault("pod-template-hash", "7d9f8c")
            ref = owner_name or f"{base}-7d9f8c"
        else:
            ref = owner_name or base
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": ref, "controller": True}]
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"} if requests is None else dict(requests)}
    if gpu:
        resources["requests"].update(gpu)
        resources["limits"] = dict(gpu)
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "main", "image": "i", "resources": resources}],
    }
    if volumes:
        spec["volumes"] = volumes
    if priority is not None:
        spec["priority"] = priority
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


def pdb(name: str, selector: dict[str, Any], allowed: int, namespace: str = "ml") -> dict[str, Any]:
    """A PodDisruptionBudget with `allowed` disruptions allowed now."""
    return {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "minAvailable": 1},
        "status": {"disruptionsAllowed": allowed},
    }


def gpu(node_name: str, index: int, util: float, **fields: Any) -> GpuUsage:
    """A whole GPU of `node_name` over the window at `util` percent (A100-40GB unless `model` says otherwise)."""
    fields.setdefault("model", A100)
    fields.setdefault("fb_total", 40960.0)
    return GpuUsage(node=node_name, gpu=str(index), util_mean=util, util_p95=util, **fields)


def gpus(node_name: str, count: int, util: float, **fields: Any) -> list[GpuUsage]:
    """`count` GPUs of one node at the same utilization."""
    return [gpu(node_name, i, util, **fields) for i in range(count)]


def usage(*gpu_list: GpuUsage, window: Window = WEEK) -> Usage:
    """The window's usage of these GPUs."""
    return Usage(window=window, source="test", gpus=tuple(gpu_list))


def inputs(found: Usage, objects: list[dict[str, Any]] | None = None, policy: str = "", **kw: Any) -> Inputs:
    """Findings' inputs: the usage, a cluster of `objects` (None: no cluster), the policy from YAML text."""
    cluster: Cluster | None = None if objects is None else from_objects(objects)
    parsed: Policy = parse_policy(policy.encode())
    return Inputs(found, cluster, parsed, kw.pop("thresholds", Thresholds()), **kw)
