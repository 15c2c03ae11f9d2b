"""A synthetic cluster for the extender benchmark: Node and Pod lists, a DCGM exporter snapshot, ExtenderArgs.

Nodes have 8 GPUs each: 40% A100-40GB in MIG `all-balanced` (16x 1g.5gb, 8x 2g.10gb, 8x 3g.20gb), 30% T4 or
A10 time-sliced with 4 replicas (32 `nvidia.com/gpu.shared`), 30% H100 whole GPUs (8 `nvidia.com/gpu`); some
are spot (`node-type: spot`, tainted). Every node runs 5 DaemonSet pods; GPU pods fill each node's GPUs to a
random level (about one node in ten is left empty); CPU-only pods make up the rest. No node is ever over its
allocatable. The DCGM snapshot has `DCGM_FI_DEV_GPU_UTIL` for every whole or time-sliced GPU and
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` for every MIG instance, as dcgm-exporter writes them with Kubernetes mapping.

Everything is deterministic for a given seed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

MIG_1G, MIG_2G, MIG_3G = "nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb"
GPU, SHARED = "nvidia.com/gpu", "nvidia.com/gpu.shared"
GIB = 1024**3

# instances of each profile per A100-40GB GPU in all-balanced, with the MIG instance ids dcgm-exporter reports
BALANCED = ((MIG_3G, "3g.20gb", 1, 2), (MIG_2G, "2g.10gb", 2, 3), (MIG_1G, "1g.5gb", 2, 9))

DAEMONSETS = (
    ("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.36.0", 100, 128),
    ("gpu-operator", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", 50, 64),
    ("gpu-operator", "nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04", 100, 512),
    ("gpu-operator", "gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", 10, 64),
    ("monitoring", "node-exporter", "quay.io/prometheus/node-exporter:v1.9.1", 100, 180),
)


@dataclass(slots=True)
class NodePlan:
    """One generated node and what the generator put on it."""

    name: str
    kind: str
    """mig, shared or whole."""
    model: str
    spot: bool
    cpu_m: int
    mem: int
    offers: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    cpu_used: int = 0
    mem_used: int = 0
    gpu_pods: list[list[str]] = field(default_factory=list)
    """Per GPU: the pods on it (time-sliced and whole) ..."""
    mig_pods: dict[tuple[int, str], str] = field(default_factory=dict)
    """... or per (GPU, instance id): the pod on that MIG instance."""
    hot: bool = False

    def free(self, resource: str) -> int:
        return self.offers.get(resource, 0) - self.used.get(resource, 0)


@dataclass(slots=True)
class Cluster:
    """The generated cluster and where it was written."""

    nodes: list[NodePlan]
    nodes_file: Path
    pods_file: Path
    metrics_file: Path
    pod_count: int
    gpu_count: int
    series: int


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _node_json(plan: NodePlan, index: int) -> dict[str, Any]:
    zone = f"us-east-1{'abc'[index % 3]}"
    labels = {
        "kubernetes.io/hostname": plan.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": zone,
        "node-type": "spot" if plan.spot else "on-demand",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.present": "true",
    }
    if plan.kind == "mig":
        labels |= {
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.memory": "40960",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.strategy": "mixed",
        }
    elif plan.kind == "shared":
        t4 = plan.model.startswith("Tesla")
        labels |= {
            "node.kubernetes.io/instance-type": "g4dn.metal" if t4 else "g5.48xlarge",
            "nvidia.com/gpu.product": "Tesla-T4-SHARED" if t4 else "NVIDIA-A10G-SHARED",
            "nvidia.com/gpu.memory": "15360" if t4 else "23028",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        }
    else:
        labels |= {
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81559",
        }
    allocatable = {
        "cpu": f"{plan.cpu_m // 1000}",
        "memory": f"{plan.mem // GIB}Gi",
        "pods": "110",
        "ephemeral-storage": "1844532770680",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    } | {r: str(n) for r, n in plan.offers.items()}
    spec: dict[str, Any] = {
        "providerID": f"aws:///{zone}/i-{index:017x}",
        "podCIDR": f"10.{index // 250}.{index % 250}.0/24",
    }
    if plan.spot:
        spec["taints"] = [{"key": "node-type", "value": "spot", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": plan.name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, plan.name)),
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [
                {"type": "InternalIP", "address": f"10.{index // 250}.{index % 250}.1"},
                {"type": "Hostname", "address": plan.name},
            ],
            "nodeInfo": {"kubeletVersion": "v1.36.0", "containerRuntimeVersion": "containerd://2.0.5"},
        },
    }


def pod_json(
    name: str,
    namespace: str,
    uid: str,
    node: str | None,
    requests: dict[str, str],
    *,
    workload: str | None = None,
    image: str = "registry.example.com/app:1.0",
    owner: str = "ReplicaSet",
    tolerate_spot: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod object as `kubectl get pods -o json` lists it (without managedFields)."""
    labels = {"app": name.rsplit("-", 2)[0], "pod-template-hash": "5d8f7c9b4"}
    annotations: dict[str, str] = {}
    if workload:
        labels["gpupack.io/workload"] = workload
        annotations = {"gpupack.io/class": workload, "gpupack.io/policy-version": "builtin"}
    limits = {r: v for r, v in requests.items() if r.startswith("nvidia.com/") or r == "memory"}
    tolerations = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    if tolerate_spot:
        tolerations.append({"key": "node-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": image,
                "resources": {"requests": requests, "limits": limits},
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "tolerations": tolerations,
        "priority": 0,
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if node:
        status |= {"hostIP": "10.0.0.1", "podIP": "10.244.0.1", "startTime": "2026-11-29T20:40:30Z"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "96",
            "creationTimestamp": "2026-11-29T20:40:26Z",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": labels["app"],
                    "uid": uid[:8] + "-owner",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def _plan_nodes(count: int, rng: random.Random) -> list[NodePlan]:
    plans = []
    n_mig, n_shared = int(count * 0.4), int(count * 0.3)
    for i in range(count):
        if i < n_mig:
            plan = NodePlan(
                f"a100-mig-{i:05d}", "mig", "NVIDIA A100-SXM4-40GB", rng.random() < 0.1, 95_000, 1000 * GIB,
                {MIG_1G: 16, MIG_2G: 8, MIG_3G: 8},
            )  # fmt: skip
        elif i < n_mig + n_shared:
            t4 = i % 2 == 0
            plan = NodePlan(
                f"{'t4' if t4 else 'a10'}-ts-{i:05d}", "shared", "Tesla T4" if t4 else "NVIDIA A10G",
                rng.random() < 0.5, 63_000, 500 * GIB, {SHARED: 32},
            )  # fmt: skip
        else:
            plan = NodePlan(
                f"h100-{i:05d}", "whole", "NVIDIA H100 80GB HBM3", rng.random() < 0.4, 190_000, 2000 * GIB, {GPU: 8}
            )
        plan.gpu_pods = [[] for _ in range(8)]
        plan.hot = rng.random() < 0.05
        plans.append(plan)
    return plans


class _PodWriter:
    """Builds pods into a list while keeping every node within its allocatable."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.items: list[dict[str, Any]] = []

    def add(
        self,
        plan: NodePlan,
        prefix: str,
        namespace: str,
        cpu_m: int,
        mem: int,
        gpu: tuple[str, int] | None = None,
        workload: str | None = None,
        owner: str = "ReplicaSet",
    ) -> str | None:
        if plan.cpu_used + cpu_m > plan.cpu_m or plan.mem_used + mem > plan.mem:
            return None
        if gpu is not None and plan.free(gpu[0]) < gpu[1]:
            return None
        rng = self.rng
        name = f"{prefix}-{rng.getrandbits(32):08x}-{rng.getrandbits(20):05x}"
        requests = {"cpu": f"{cpu_m}m", "memory": f"{mem // (1024 * 1024)}Mi"}
        if gpu is not None:
            requests[gpu[0]] = str(gpu[1])
            plan.used[gpu[0]] = plan.used.get(gpu[0], 0) + gpu[1]
        plan.cpu_used += cpu_m
        plan.mem_used += mem
        pod = pod_json(
            name, namespace, _uid(rng), plan.name, requests, workload=workload, owner=owner, tolerate_spot=plan.spot
        )
        self.items.append(pod)
        return name


def _fill_gpus(plan: NodePlan, writer: _PodWriter, rng: random.Random) -> None:
    level = 0.0 if rng.random() < 0.1 else rng.uniform(0.2, 1.0)
    if plan.kind == "mig":
        for index in range(8):
            for resource, profile, count, first_id in BALANCED:
                for k in range(count):
                    if rng.random() >= level:
                        continue
                    cpu, mem = {"1g.5gb": (1000, 4), "2g.10gb": (2000, 8), "3g.20gb": (4000, 16)}[profile]
                    ns = rng.choice(("ml-serving", "search", "recsys"))
                    name = writer.add(plan, f"infer-{profile[:2]}", ns, cpu, mem * GIB, (resource, 1), "inference")
                    if name:
                        plan.mig_pods[(index, str(first_id + k))] = f"{ns}/{name}"
    elif plan.kind == "shared":
        for index in range(8):
            for _ in range(4):
                if rng.random() < level:
                    name = writer.add(plan, "batch-embed", "batch", 1000, 4 * GIB, (SHARED, 1), "batch", owner="Job")
                    if name:
                        plan.gpu_pods[index].append(f"batch/{name}")
    else:
        target, index = round(level * 8), 0
        while index < target:
            n = min(rng.choice((1, 1, 2, 4, 8)), target - index)
            name = writer.add(plan, f"train-{n}g", "training", 20_000 * n, 200 * GIB * n, (GPU, n), "training", "Job")
            if name is None:
                break
            for g in range(index, index + n):
                plan.gpu_pods[g].append(f"training/{name}")
            index += n


def _utilization(plan: NodePlan, busy: bool, rng: random.Random) -> float:
    """0-1: idle GPUs near 0, busy ones spread, a hot node's all above 85%."""
    if plan.hot and busy:
        return rng.uniform(0.86, 0.99)
    return rng.uniform(0.15, 0.95) if busy else rng.uniform(0.0, 0.03)


def _dcgm_lines(plans: list[NodePlan], rng: random.Random) -> Iterator[str]:
    yield "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)."
    yield "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"
    for plan in plans:
        if plan.kind == "mig":
            continue
        for index in range(8):
            pods = plan.gpu_pods[index]
            labels = _gpu_labels(plan, index)
            if pods:
                ns, pod = pods[0].split("/", 1)
                labels += f',container="main",namespace="{ns}",pod="{pod}"'
            yield f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {round(100 * _utilization(plan, bool(pods), rng))}"
    yield "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active."
    yield "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"
    for plan in plans:
        if plan.kind != "mig":
            continue
        for index in range(8):
            base = _gpu_labels(plan, index)
            for _resource, profile, count, first_id in BALANCED:
                for k in range(count):
                    instance = str(first_id + k)
                    labels = f'{base},GPU_I_PROFILE="{profile}",GPU_I_ID="{instance}"'
                    pod = plan.mig_pods.get((index, instance))
                    if pod:
                        ns, name = pod.split("/", 1)
                        labels += f',container="main",namespace="{ns}",pod="{name}"'
                    activity = _utilization(plan, pod is not None, rng)
                    yield f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {activity:.4f}"


def _gpu_labels(plan: NodePlan, index: int) -> str:
    gpu_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{plan.name}/{index}")
    return (
        f'gpu="{index}",UUID="GPU-{gpu_uuid}",pci_bus_id="00000000:{16 + index:02X}:00.0",device="nvidia{index}",'
        f'modelName="{plan.model}",Hostname="{plan.name}",DCGM_FI_DRIVER_VERSION="550.90.07"'
    )


def generate(out: Path, nodes: int = 5000, pods: int = 150_000, seed: int = 1) -> Cluster:
    """Write nodes.json, pods.json and dcgm.txt into `out`."""
    rng = random.Random(seed)
    plans = _plan_nodes(nodes, rng)
    writer = _PodWriter(rng)
    for plan in plans:
        for ns, ds, image, cpu, mem_mi in DAEMONSETS:
            writer.add(plan, ds, ns, cpu, mem_mi * 1024 * 1024, owner="DaemonSet")
            writer.items[-1]["spec"]["containers"][0]["image"] = image
        _fill_gpus(plan, writer, rng)
    if len(writer.items) > pods:
        raise ValueError(f"{len(writer.items)} DaemonSet and GPU pods already exceed {pods}")
    web = ("web", "api", "cache", "etl", "sidecar-proxy", "metrics-agent")
    while len(writer.items) < pods:
        plan = rng.choice(plans)
        cpu = rng.choice((100, 250, 500, 1000))
        writer.add(plan, rng.choice(web), rng.choice(("default", "platform", "data")), cpu, cpu * 2 * 1024 * 1024)
    out.mkdir(parents=True, exist_ok=True)
    nodes_file, pods_file, metrics_file = out / "nodes.json", out / "pods.json", out / "dcgm.txt"
    node_items = [_node_json(plan, i) for i, plan in enumerate(plans)]
    nodes_file.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": node_items}))
    pods_file.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": writer.items}))
    lines = list(_dcgm_lines(plans, rng))
    metrics_file.write_text("\n".join(lines) + "\n")
    return Cluster(
        plans,
        nodes_file,
        pods_file,
        metrics_file,
        len(writer.items),
        8 * len(plans),
        sum(not x.startswith("#") for x in lines),
    )


def pod_items(cluster: Cluster) -> list[dict[str, Any]]:
    """The generated pods, read back."""
    items: list[dict[str, Any]] = orjson.loads(cluster.pods_file.read_bytes())["items"]
    return items


# requests ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PendingPod:
    """A kind of pod the scheduler asks about."""

    name: str
    workload: str
    resource: str
    count: int
    cpu_m: int
    mem_gi: int
    latency: str | None = None


PENDING = (
    PendingPod("llm-infer-1g", "inference", MIG_1G, 1, 1000, 4),
    PendingPod("llm-infer-2g", "inference", MIG_2G, 1, 2000, 8),
    PendingPod("reranker-3g", "inference", MIG_3G, 1, 4000, 16, latency="tolerant"),
    PendingPod("embed-batch", "batch", SHARED, 1, 1000, 4),
    PendingPod("ddp-worker-4g", "training", GPU, 4, 80_000, 800),
    PendingPod("ddp-worker-1g", "training", GPU, 1, 20_000, 200),
)


def pending_pod_json(kind: PendingPod, rng: random.Random) -> dict[str, Any]:
    """The Pod of an ExtenderArgs: as admitted by the webhook, not yet bound."""
    requests = {"cpu": f"{kind.cpu_m}m", "memory": f"{kind.mem_gi}Gi", kind.resource: str(kind.count)}
    name = f"{kind.name}-{rng.getrandbits(20):05x}"
    pod = pod_json(
        name,
        "ml",
        _uid(rng),
        None,
        requests,
        workload=kind.workload,
        owner="Job" if kind.workload != "inference" else "ReplicaSet",
        tolerate_spot=kind.workload != "inference",
        phase="Pending",
    )
    if kind.latency:
        pod["metadata"]["labels"]["gpupack.io/latency"] = kind.latency
    return pod


def extender_args(cluster: Cluster, kind: PendingPod, names: int, rng: random.Random, anywhere: bool = False) -> bytes:
    """An ExtenderArgs in the cache-capable form: `names` node names that passed kube-scheduler's own filters
    (nodes with a free unit of the pod's resource; from all nodes when `anywhere`)."""
    if anywhere:
        pool = [p.name for p in cluster.nodes]
    else:
        pool = [p.name for p in cluster.nodes if p.free(kind.resource) >= kind.count]
    picked = rng.sample(pool, min(names, len(pool)))
    return orjson.dumps({"Pod": pending_pod_json(kind, rng), "Nodes": None, "NodeNames": picked})


def request_bodies(cluster: Cluster, names: int = 500, seed: int = 2) -> list[bytes]:
    """One ExtenderArgs per kind of pending pod, plus one with names drawn from every node."""
    rng = random.Random(seed)
    bodies = [extender_args(cluster, kind, names, rng) for kind in PENDING]
    bodies.append(extender_args(cluster, PENDING[0], names, rng, anywhere=True))
    return bodies


def preemption_bodies(cluster: Cluster, candidates: int = 5000, seed: int = 3) -> list[bytes]:
    """ExtenderPreemptionArgs in the cache-capable form (victims by uid), one per kind of pending pod that preempts
    (MIG inference and whole-GPU training): `candidates` nodes, each with up to two bound pods of the node as its
    victims, those holding the pod's resource first, as kube-scheduler's dry run would pick them."""
    rng = random.Random(seed)
    by_node: dict[str, list[tuple[str, set[str]]]] = {}
    for pod in pod_items(cluster):
        spec = pod["spec"]
        held = {r for c in spec["containers"] for r in (c.get("resources") or {}).get("requests", {})}
        by_node.setdefault(spec["nodeName"], []).append((pod["metadata"]["uid"], held))
    bodies = []
    for kind in (PENDING[0], PENDING[5]):
        names = rng.sample([p.name for p in cluster.nodes if by_node.get(p.name)], min(candidates, len(by_node)))
        victims = {}
        for name in names:
            pods = sorted(by_node[name], key=lambda p: kind.resource not in p[1])
            victims[name] = {"Pods": [{"UID": uid} for uid, _ in pods[:2]], "NumPDBViolations": 0}
        bodies.append(orjson.dumps({"Pod": pending_pod_json(kind, rng), "NodeNameToMetaVictims": victims}))
    return bodies
