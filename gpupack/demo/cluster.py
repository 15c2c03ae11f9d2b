"""The embedded cluster of the demo: GPU nodes as GPU Feature Discovery labels them, pods already running,
the DCGM exporter snapshot those pods produce, the gpupack scheduler's leader Lease, and the pods a team submits
next.

Eleven GPU nodes: three A100-40GB in the `all-balanced` MIG layout (per GPU 2x 1g.5gb, 1x 2g.10gb, 1x 3g.20gb),
two H100 on-demand and two on spot (labelled and tainted `node-type=spot`), three T4 time-sliced 4 ways, one
T4 time-sliced on spot. Some already run inference and training.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpupack.core.admitted import admitted_pod
from gpupack.core.gpus.catalog import MODELS
from gpupack.core.objects import (
    GFD_MIG_STRATEGY,
    GFD_REPLICAS,
    GFD_SHARING_STRATEGY,
    MIG_CONFIG,
    STATEFULSET,
    gfd_labels,
)
from gpupack.testing.dcgm import Gpu, MigGpu, MigInstance, Workload
from gpupack.testing.dcgm import Node as ExporterNode

W = "gpupack.io/"
SPOT = {"key": "node-type", "value": "spot", "effect": "NoSchedule"}
A100 = {**gfd_labels(MODELS["A100-40GB"], 8), MIG_CONFIG: "all-balanced", GFD_MIG_STRATEGY: "mixed"}
A100_MIG = {"nvidia.com/mig-1g.5gb": 16, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 8}
H100 = gfd_labels(MODELS["H100-80GB"], 8)
T4 = {**gfd_labels(MODELS["T4-16GB"], 4, shared=True), GFD_REPLICAS: "4", GFD_SHARING_STRATEGY: "time-slicing"}


def _node(name: str, labels: dict[str, str], gpus: dict[str, int], spot: bool = False) -> dict[str, Any]:
    allocatable = {"cpu": "94", "memory": "900Gi", "pods": "110", **{k: str(v) for k, v in gpus.items()}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "node-type": "spot" if spot else "on-demand"}},
        "spec": {"taints": [SPOT]} if spot else {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


NODES: list[dict[str, Any]] = [
    *(_node(f"a100-mig-{i}", A100, A100_MIG) for i in (1, 2, 3)),
    *(_node(f"h100-od-{i}", H100, {"nvidia.com/gpu": 8}) for i in (1, 2)),
    *(_node(f"h100-spot-{i}", H100, {"nvidia.com/gpu": 8}, spot=True) for i in (1, 2)),
    *(_node(f"t4-ts-{i}", T4, {"nvidia.com/gpu.shared": 16}) for i in (1, 2, 3)),
    _node("t4-spot-1", T4, {"nvidia.com/gpu.shared": 16}, spot=True),
]


@dataclass(frozen=True, slots=True)
class Running:
    """A pod already bound: where, what it holds, how busy it keeps what it holds (0-1)."""

    name: str
    node: str
    resource: str
    count: int
    busy: float


RUNNING: list[Running] = [
    Running("chat-api-0", "a100-mig-1", "nvidia.com/mig-2g.10gb", 1, 0.45),
    Running("chat-api-1", "a100-mig-1", "nvidia.com/mig-2g.10gb", 1, 0.40),
    Running("embed-0", "a100-mig-1", "nvidia.com/mig-1g.5gb", 1, 0.30),
    Running("pretrain-0", "h100-od-1", "nvidia.com/gpu", 4, 0.92),
    Running("ocr-0", "t4-ts-1", "nvidia.com/gpu.shared", 1, 0.15),
    Running("ocr-1", "t4-ts-1", "nvidia.com/gpu.shared", 1, 0.12),
    Running("ocr-2", "t4-ts-1", "nvidia.com/gpu.shared", 1, 0.10),
]


def running_pods() -> list[dict[str, Any]]:
    """The running pods as Pod objects (bound, phase Running)."""
    pods = []
    for r in RUNNING:
        pod = admitted_pod(
            r.name, resources={"requests": {r.resource: str(r.count)}, "limits": {r.resource: str(r.count)}}
        )
        pod["metadata"]["uid"] = f"running-{r.name}"
        pod["spec"]["nodeName"] = r.node
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return pods


LEADER = "gpupack-scheduler-6f7c9d-x2k9q_3b1f"  # kube-scheduler's identity: hostname_uuid


def leader_lease(
    namespace: str, name: str, renewed_at: float, holder: str = LEADER, duration: int = 15
) -> dict[str, Any]:
    """The Lease kube-scheduler's leader election keeps (coordination.k8s.io/v1), renewed at `renewed_at`."""
    stamp = datetime.fromtimestamp(renewed_at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # MicroTime
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


def exporters() -> list[ExporterNode]:
    """What each node's DCGM exporter reports for the running pods (packed onto the first GPUs)."""
    out: list[ExporterNode] = []
    for node in NODES:
        name = node["metadata"]["name"]
        here = [r for r in RUNNING if r.node == name]
        if name.startswith("a100"):
            gpus: list[Gpu | MigGpu] = []
            profiles = ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
            taken = {p: [r for r in here if r.resource.endswith(p)] for p in set(profiles)}
            for index in range(8):
                instances = []
                for slot, profile in enumerate(profiles):
                    owner = taken[profile].pop(0) if taken[profile] else None
                    instances.append(
                        MigInstance(
                            profile,
                            index * 4 + slot + 1,
                            owner.busy if owner else 0.0,
                            workload=Workload(owner.name, "ml-serving") if owner else None,
                        )
                    )
                gpus.append(MigGpu(instances))
            out.append(ExporterNode(name, gpus, model="NVIDIA A100-SXM4-40GB"))
        elif name.startswith("h100"):
            busy = [r for r in here for _ in range(r.count)]
            gpus = [Gpu(100 * busy[i].busy if i < len(busy) else 0.0) for i in range(8)]
            out.append(ExporterNode(name, gpus))
        else:
            load = sum(r.busy for r in here)  # time-sliced replicas packed on GPU 0
            gpus = [Gpu(100 * min(load, 1.0) if i == 0 else 0.0, fb_total=15360.0) for i in range(4)]
            out.append(ExporterNode(name, gpus, model="Tesla T4"))
    return out


@dataclass(frozen=True, slots=True)
class Submitted:
    """A pod the team submits: why it is in the demo, which webhook path sees it, how busy it will keep its GPU."""

    title: str
    path: str
    pod: dict[str, Any]
    busy: float


def _p(name: str, labels: dict[str, str], namespace: str = "ml-serving", **kw: Any) -> dict[str, Any]:
    return admitted_pod(name, {W + k: v for k, v in labels.items()}, namespace=namespace, **kw)


M, NS = "/mutate", "/mutate/opted-in-namespace"
SUBMITTED: list[Submitted] = [
    Submitted("inference, 8Gi model", M, _p("llm-7b", {"workload": "inference", "gpu-memory": "8Gi"}), 0.35),
    Submitted("inference, no gpu-memory label", M, _p("llm-default", {"workload": "inference"}), 0.30),
    Submitted("inference, 4Gi model", M, _p("reranker", {"workload": "inference", "gpu-memory": "4Gi"}), 0.25),
    Submitted("inference, 16Gi model", M, _p("llm-13b", {"workload": "inference", "gpu-memory": "16Gi"}), 0.40),
    Submitted(
        "inference, latency tolerant",
        M,
        _p("embedder", {"workload": "inference", "latency": "tolerant"}),
        0.20,
    ),
    *(
        Submitted(
            "another latency-tolerant replica" if i else "four more latency-tolerant replicas",
            M,
            _p(f"embedder-{i}", {"workload": "inference", "latency": "tolerant"}),
            0.15,
        )
        for i in range(4)
    ),
    Submitted(
        "inference, 200Gi model (larger than every MIG profile)",
        M,
        _p("llm-405b", {"workload": "inference", "gpu-memory": "200Gi"}),
        0.55,
    ),
    Submitted(
        "two more replicas of the 8Gi model", M, _p("llm-7b-b", {"workload": "inference", "gpu-memory": "8Gi"}), 0.35
    ),
    Submitted("", M, _p("llm-7b-c", {"workload": "inference", "gpu-memory": "8Gi"}), 0.35),
    Submitted(
        "training, 4 GPUs",
        M,
        _p("ddp-worker-0", {"workload": "training", "gpus": "4"}, namespace="ml-training"),
        0.90,
    ),
    Submitted(
        "training that checkpoints",
        M,
        _p("finetune-0", {"workload": "training", "checkpoint": "true"}, namespace="ml-training"),
        0.85,
    ),
    Submitted("batch", M, _p("bert-batch-x1", {"workload": "batch"}, namespace="ml-training"), 0.60),
    Submitted(
        "StatefulSet inference pod",
        M,
        _p("vector-db-0", {"workload": "inference", "gpu-memory": "20Gi"}, owner=STATEFULSET),
        0.20,
    ),
    Submitted(
        "GPU pod in an opted-in namespace, no label",
        NS,
        admitted_pod("notebook", resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}),
        0.10,
    ),
    Submitted("invalid label gpu-memory=lots", M, _p("typo", {"workload": "inference", "gpu-memory": "lots"}), 0.0),
    Submitted("pod that did not opt in", M, admitted_pod("web", {"app": "web"}), 0.0),
]
