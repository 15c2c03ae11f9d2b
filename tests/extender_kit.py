"""Builders for extender tests: nodes, pods and app state from the recordings or by hand."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CollectorRegistry

from gpupack.core import contract
from gpupack.core.policy import Policy, parse_policy
from gpupack.core.policy_store import PolicyStore
from gpupack.extender.app import Extender, ExtenderSettings
from gpupack.extender.demand import PodDemand, demand_of
from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.service import load_lists
from gpupack.extender.snapshot import NodeSnapshot
from gpupack.extender.state import ClusterState
from gpupack.extender.typical import gpu_layout
from tests.conftest import RECORDED, loaded, recorded_text

EXTENDER_FIXTURES = sorted([*RECORDED.glob("extender-node-names/*.json"), *RECORDED.glob("extender-full-nodes/*.json")])
GO_FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def policy(doc: str = "") -> Policy:
    """A validated policy from YAML text."""
    return parse_policy(doc.encode())


def recorded_nodes() -> list[dict[str, Any]]:
    """The recorded cluster's Node objects (placeholder label domain renamed)."""
    items: list[dict[str, Any]] = json.loads(recorded_text(RECORDED / "nodes.json"))["items"]
    return items


def recorded_args(name: str) -> dict[str, Any]:
    """One recorded ExtenderArgs by file name."""
    path = next(p for p in EXTENDER_FIXTURES if p.name == name)
    args: dict[str, Any] = json.loads(recorded_text(path))
    return args


def extender_for(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, doc: str = "") -> Extender:
    """An Extender whose watch cache holds `nodes` and `pods`."""
    store = PolicyStore(None, loaded(doc))
    state = ClusterState()
    load_lists(state, nodes, pods or [], store.policy)
    return Extender(store, state, ExtenderSettings(max_body_bytes=256 * 1024))


def node(
    name: str = "n1",
    gpus: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node object with GPU resources in its allocatable."""
    allocatable: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110"}
    allocatable.update({k: str(v) for k, v in (gpus or {}).items()})
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


A100_BALANCED = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/mig.config": "all-balanced",
}
A100_BALANCED_GPUS = {"nvidia.com/mig-1g.5gb": 16, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 8}
T4_SHARED = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"}


def gpu_pod(
    resource: str, count: int = 1, workload: str | None = "inference", name: str = "p", **labels: str
) -> dict[str, Any]:
    """A pod requesting `count` of a GPU resource, with gpupack labels."""
    all_labels = {"gpupack.io/workload": workload} if workload else {}
    all_labels.update({f"gpupack.io/{k}": v for k, v in labels.items()})
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": all_labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", resource: str(count)},
                        "limits": {resource: str(count)},
                    },
                }
            ]
        },
    }


def demand(pod: dict[str, Any], doc: str = "") -> PodDemand:
    """The demand of a pod under a policy."""
    return demand_of(pod, policy(doc))


def snap(
    node_json: dict[str, Any], used: dict[str, int] | None = None, utils: tuple[float, ...] = (), doc: str = ""
) -> NodeSnapshot:
    """A node snapshot built by hand: `used` as pods of one device each (and one pod with the CPU and memory)."""
    record: NodeRecord = node_from_json(node_json, policy(doc))
    used = used or {}
    pods = [((r, 1),) for r, n in used.items() if contract.is_gpu_resource(r) for _ in range(n)]
    rest = tuple((r, n) for r, n in used.items() if not contract.is_gpu_resource(r))
    pods += [rest] if rest else []
    return NodeSnapshot(record, used, utils, tuple(gpu_layout(record, pods)), len(pods))


def registry() -> CollectorRegistry:
    """A private registry."""
    return CollectorRegistry()
