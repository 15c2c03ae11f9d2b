"""The synthetic day's objects: Node objects as GPU Feature Discovery labels them, raw pods as controllers create
them, and the jobs that arrive during the day.

Nodes carry the GFD labels of the catalog's models (`gpupack.core.objects.gfd_labels`), as the demo's do, so the
extender reads them as it reads a real node. Pods are `gpupack.core.admitted.admitted_pod` with the gpupack labels a
developer writes: the webhook decides the rest. `without_gpupack` turns such a pod into the one the same developer
writes for a cluster without gpupack. Every random draw is made here, up front, from the scenario's seed and independent
of placement, so every run (without gpupack and under each scoring policy) sees the same arrivals, durations and
utilizations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpupack.core import contract
from gpupack.core.admitted import admitted_pod
from gpupack.core.gpus import stock
from gpupack.core.gpus.catalog import MODELS, GpuModel
from gpupack.core.gpus.geometry import Counts, LayoutError, check, counts_of, instances
from gpupack.core.gpus.stock import STOCK
from gpupack.core.objects import (
    GFD_MIG_STRATEGY,
    GFD_PRODUCT,
    GFD_REPLICAS,
    GFD_SHARING_STRATEGY,
    MIG_CONFIG,
    gfd_labels,
)
from gpupack.core.policy import SpotPolicy
from gpupack.core.spot import KARPENTER_CAPACITY_TYPE
from gpupack.simulator.day.scenario import (
    DEFAULT_MIG_LAYOUT,
    LABEL_VALUE,
    MIG_MODEL,
    Inference,
    Jobs,
    NodeGroup,
    Scenario,
    ScenarioError,
    Spread,
)

MIG_PER_GPU = {contract.mig_resource(name): n for name, n in STOCK[DEFAULT_MIG_LAYOUT][MIG_MODEL]}
"""The default (`all-balanced`) layout of an A100-40GB: 2x 1g.5gb, 1x 2g.10gb, 1x 3g.20gb per GPU."""
DEFAULT_REPLICAS = 4
LABEL_VALUE_RE = re.compile(LABEL_VALUE)


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """The MIG layout of one node: its `nvidia.com/mig.config` name and the instances of each of its GPUs.

    What a MIG manager applies from one mig-parted config entry, and what a planner whose layouts differ by node
    hands the day (`cluster_nodes(layouts=...)`) without writing a scenario per node.
    """

    config: str
    gpus: tuple[Counts, ...]

    def allocatable(self) -> dict[str, int]:
        """`nvidia.com/mig-<profile>` -> instances summed over the GPUs, as the device plugin's mixed strategy
        advertises them."""
        return instances(self.gpus)


NodeLayoutSpec = NodeLayout | tuple[str, tuple[Counts, ...]]
"""A node's layout as a NodeLayout or as its plain (config name, per-GPU counts) pair."""


def layout_name(gpus: tuple[Counts, ...]) -> str:
    """The `nvidia.com/mig.config` value of an unnamed layout: the name `gpupack mig-plan` gives it (its stock name
    when every GPU holds one stock layout, else a digest of the instances)."""
    return stock.layout_name(MIG_MODEL, gpus)


def group_layout(group: NodeGroup) -> NodeLayout:
    """The MIG layout of each node of an a100-mig group (`migLayout`, `all-balanced` when absent)."""
    spec = group.mig_layout if group.mig_layout is not None else DEFAULT_MIG_LAYOUT
    if isinstance(spec, str):
        return NodeLayout(spec, (STOCK[spec][MIG_MODEL],) * group.gpus_per_node)
    gpus = tuple(counts_of(c) for c in spec)
    return NodeLayout(group.mig_config or layout_name(gpus), gpus)


def node_layout(node: str, group: NodeGroup, spec: NodeLayoutSpec) -> NodeLayout:
    """A per-node override checked like a scenario's `migLayout`: an a100-mig node, one legal layout per GPU and
    a label value for a name. Raises ScenarioError naming the node and the reason."""
    layout = spec if isinstance(spec, NodeLayout) else NodeLayout(spec[0], tuple(spec[1]))
    if group.gpu != "a100-mig":
        raise ScenarioError(f"layouts: {node} is a {group.gpu} node; MIG layouts apply to a100-mig nodes")
    if len(layout.gpus) != group.gpus_per_node:
        raise ScenarioError(f"layouts: {node} has {group.gpus_per_node} GPUs, the layout lists {len(layout.gpus)}")
    if not LABEL_VALUE_RE.fullmatch(layout.config) or len(layout.config) > 63:
        raise ScenarioError(
            f"layouts: {node}: {layout.config!r} is not a label value (63 characters of [A-Za-z0-9._-])"
        )
    for index, counts in enumerate(layout.gpus):
        try:
            check(MIG_MODEL, dict(counts))
        except LayoutError as exc:
            raise ScenarioError(f"layouts: {node} GPU {index}: {exc}") from exc
    return NodeLayout(layout.config, tuple(counts_of(dict(c)) for c in layout.gpus))


A100, H100, T4 = MODELS["A100-40GB"], MODELS["H100-80GB"], MODELS["T4-16GB"]
"""The models of the day's node groups (`a100-mig`, `h100`, `t4`), as the demo cluster has them."""
MODEL_OF: dict[str, GpuModel] = {"a100-mig": A100, "h100": H100, "t4": T4}


def pinned_to(pod: dict[str, Any], gpu: str | None) -> dict[str, Any]:
    """The pod with the required node affinity its team writes to pin a GPU model: the product GFD labels it
    with, time-sliced (`-SHARED`) or not. The input is not modified."""
    if gpu is None:
        return pod
    product = MODEL_OF[gpu].product
    term = {"matchExpressions": [{"key": GFD_PRODUCT, "operator": "In", "values": [product, f"{product}-SHARED"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {**pod, "spec": {**pod["spec"], "affinity": affinity}}


def _spot_taint() -> dict[str, str]:
    """The default policy's own spot taint (`node-type=spot`), which the day's spot nodes carry."""
    key, value, effect = SpotPolicy().tolerated[0]
    return {"key": key, "value": value, "effect": effect}


SPOT = _spot_taint()
"""The default policy's spot taint, which the day's spot nodes carry (cloud spot pools are tainted)."""


def group_resources(
    group: NodeGroup, *, partitioned: bool = True, layout: NodeLayout | None = None
) -> tuple[dict[str, str], dict[str, int]]:
    """GFD labels and GPU allocatable of one node of the group; `layout` replaces an a100-mig group's own.

    `partitioned=False` is the same machine in a cluster without gpupack, where nobody partitions GPUs that no
    pod asks slices of: MIG off and no time-slicing config, so the device plugin advertises whole
    `nvidia.com/gpu` and GFD drops the partitioning labels and the `-SHARED` product suffix.
    """
    gpus = group.gpus_per_node
    if not partitioned:
        model = {"a100-mig": A100, "h100": H100}.get(group.gpu, T4)
        return gfd_labels(model, gpus), {contract.RESOURCE_GPU: gpus}
    if group.gpu == "a100-mig":
        mig = layout or group_layout(group)
        labels = {**gfd_labels(A100, gpus), MIG_CONFIG: mig.config, GFD_MIG_STRATEGY: "mixed"}
        return labels, mig.allocatable()
    if group.gpu == "h100":
        return gfd_labels(H100, gpus), {contract.RESOURCE_GPU: gpus}
    replicas = group.replicas or DEFAULT_REPLICAS
    labels = {
        **gfd_labels(T4, gpus, shared=True),
        GFD_REPLICAS: str(replicas),
        GFD_SHARING_STRATEGY: "time-slicing",
    }
    return labels, {contract.RESOURCE_GPU_SHARED: gpus * replicas}


def node_json(
    name: str, group: NodeGroup, *, partitioned: bool = True, layout: NodeLayout | None = None
) -> dict[str, Any]:
    """A Node object of the group (spot nodes labelled and tainted like the demo's: the cloud's spot pools
    are tainted with or without gpupack); `layout` replaces an a100-mig group's MIG layout."""
    labels, gpus = group_resources(group, partitioned=partitioned, layout=layout)
    allocatable = {
        "cpu": str(group.cpu),
        "memory": f"{group.memory_gi}Gi",
        "pods": "110",
        **{k: str(v) for k, v in gpus.items()},
    }
    if group.provisioner == "karpenter":
        capacity, taints = {KARPENTER_CAPACITY_TYPE: "spot" if group.spot else "on-demand"}, []
    else:
        capacity, taints = {"node-type": "spot" if group.spot else "on-demand"}, [dict(SPOT)] if group.spot else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, **capacity}},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def node_names(scenario: Scenario) -> list[tuple[str, NodeGroup]]:
    """Every node's name and group at the scenario's scale, in group order."""
    return [
        (f"{group.name}-{i}", group)
        for group in scenario.nodes
        for i in range(1, scenario.scaled_count(group.count) + 1)
    ]


def cluster_nodes(
    scenario: Scenario, *, partitioned: bool = True, layouts: Mapping[str, NodeLayoutSpec] | None = None
) -> list[dict[str, Any]]:
    """Every node of the scenario at its scale, in group order; `partitioned=False` as a cluster without
    gpupack sets them up (`group_resources`), which has no MIG, so `layouts` is then ignored.

    `layouts` maps node names to MIG layouts that replace their groups' (a planner's layouts differ by node);
    raises ScenarioError for a name that is no node of the scenario, or a layout `node_layout` refuses.
    """
    named = node_names(scenario)
    overrides: dict[str, NodeLayout] = {}
    if layouts and partitioned:
        groups = dict(named)
        unknown = sorted(set(layouts) - groups.keys())
        if unknown:
            raise ScenarioError(f"layouts: no node {', '.join(unknown)} in scenario {scenario.name}")
        overrides = {node: node_layout(node, groups[node], spec) for node, spec in layouts.items()}
    return [node_json(name, group, partitioned=partitioned, layout=overrides.get(name)) for name, group in named]


def _pod(name: str, namespace: str, labels: dict[str, str], owner_kind: str, owner: str) -> dict[str, Any]:
    """A raw pod as its controller creates it (deterministic owner uid: runs must not differ by a uuid)."""
    pod = admitted_pod(name, {f"{contract.DOMAIN}/{k}": v for k, v in labels.items()}, namespace=namespace)
    api = "apps/v1" if owner_kind == "ReplicaSet" else "batch/v1"
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": owner_kind, "name": owner, "uid": f"{namespace}-{owner}", "controller": True}
    ]
    return pod


def replica_pod(workload: Inference, ordinal: int) -> dict[str, Any]:
    """Replica number `ordinal` of an inference Deployment, with the labels its template carries."""
    labels = {"workload": "inference", "latency": workload.latency}
    if workload.gpu_memory is not None:
        labels["gpu-memory"] = workload.gpu_memory
    pod = _pod(f"{workload.name}-{ordinal:05d}", workload.namespace, labels, "ReplicaSet", workload.name)
    return pinned_to(pod, workload.gpu)


def job_pod(jobs: Jobs, kind: str, ordinal: int, gpus: int) -> dict[str, Any]:
    """The pod of job number `ordinal` of a training or batch stream, as the API server's Priority admission
    leaves it (its own PriorityClass resolved, if it names one)."""
    labels = {"workload": kind, "gpus": str(gpus)}
    if jobs.sharing is not None:
        labels["sharing"] = jobs.sharing
    if jobs.checkpoint:
        labels["checkpoint"] = "true"
    pod = pinned_to(
        _pod(f"{jobs.name}-{ordinal:05d}", jobs.namespace, labels, "Job", f"{jobs.name}-{ordinal:05d}"), jobs.gpu
    )
    if not jobs.gpupack_labels:
        pod = without_gpupack(pod)
    if jobs.priority_class is not None:
        own = jobs.priority_class
        pod["spec"] = {**pod["spec"], "priorityClassName": own.name, "priority": own.value}
    return pod


def without_gpupack(raw: dict[str, Any]) -> dict[str, Any]:
    """The pod the same developer writes when the cluster has no gpupack: the `gpupack.io/*` labels (which nothing
    would read) become what the guide's (docs/method.md) "before" pod asks, whole GPUs and nothing else.

    `nvidia.com/gpu` is given as a limit, the device plugin's documented form (the API server copies an extended
    resource's limit to its request); the count is the `gpupack.io/gpus` label, else 1. No CPU or memory
    requests, no MIG profile or time-sliced replica, no spot toleration or node affinity, no PriorityClass:
    everything the webhook would have added. A pod without gpupack labels is returned as it is. The input is not
    modified.
    """
    meta = raw["metadata"]
    labels = meta.get("labels") or {}
    if not any(k.startswith(f"{contract.DOMAIN}/") for k in labels):
        return raw  # written without gpupack already
    gpus = int(labels.get(contract.LABEL_GPUS, "1"))
    kept = {k: v for k, v in labels.items() if not k.startswith(f"{contract.DOMAIN}/")}
    spec = raw["spec"]
    containers = [
        {**c, "resources": {"limits": {contract.RESOURCE_GPU: str(gpus)}}} if i == 0 else dict(c)
        for i, c in enumerate(spec["containers"])
    ]
    return {**raw, "metadata": {**meta, "labels": kept}, "spec": {**spec, "containers": containers}}


def draw_busy(rng: np.random.Generator, spread: Spread) -> float:
    """A pod's mean utilization of what it holds: normal around the mean, clipped to [0.01, 1]."""
    return float(min(max(rng.normal(spread.mean, spread.sd) if spread.sd else spread.mean, 0.01), 1.0))


@dataclass(frozen=True, slots=True)
class JobArrival:
    """One training or batch job: when it is created, what it asks for, how long it runs once bound."""

    step: int
    """Creation step, counted from the start of the warm-up."""
    kind: str
    """`training` or `batch`: the scenario's section, which the day counts the job under."""
    pod: dict[str, Any]
    busy: float
    run_steps: int
    checkpoint_steps: int | None = None
    """Steps between the job's checkpoints (None: it does not checkpoint)."""


def _duration_steps(rng: np.random.Generator, jobs: Jobs, step_minutes: float) -> int:
    """A log-normal duration with the configured mean (mu = ln(mean) - sigma^2/2), in whole steps (at least 1)."""
    sigma = jobs.duration_minutes.sigma
    mean = jobs.duration_minutes.mean
    minutes = mean if sigma == 0 else float(rng.lognormal(np.log(mean) - sigma**2 / 2, sigma))
    return max(1, round(minutes / step_minutes))


def job_arrivals(scenario: Scenario) -> list[JobArrival]:
    """Every job of the run (warm-up included), ordered by step then stream; one seeded stream per job stream."""
    total = scenario.warmup_steps + scenario.steps
    streams = [("training", j) for j in scenario.training] + [("batch", j) for j in scenario.batch]
    seeds = np.random.SeedSequence(scenario.seed).spawn(len(streams))
    out: list[JobArrival] = []
    for (kind, jobs), seed in zip(streams, seeds, strict=True):
        rng = np.random.default_rng(seed)
        rate = jobs.arrivals_per_hour * scenario.scale * scenario.step_minutes / 60
        counts = rng.poisson(rate, total) if rate > 0 else np.zeros(total, dtype=np.int64)
        ordinal = 0
        checkpoint = max(1, round(jobs.checkpoint_minutes / scenario.step_minutes)) if jobs.checkpoint else None
        for step, count in enumerate(counts):
            for _ in range(int(count)):
                ordinal += 1
                gpus = int(rng.choice(jobs.gpu_choices))
                busy = draw_busy(rng, jobs.utilization)
                run = _duration_steps(rng, jobs, scenario.step_minutes)
                out.append(JobArrival(step, kind, job_pod(jobs, kind, ordinal, gpus), busy, run, checkpoint))
    out.sort(key=lambda a: a.step)  # stable: streams keep their order within a step
    return out


class ReplicaDraws:
    """Per-Deployment utilization draws by replica ordinal: replica n gets the same value in every run."""

    def __init__(self, scenario: Scenario) -> None:
        seeds = np.random.SeedSequence([scenario.seed, 1]).spawn(max(len(scenario.inference), 1))
        self._rngs = [np.random.default_rng(s) for s in seeds]
        self._drawn: list[list[float]] = [[] for _ in scenario.inference]
        self._spreads = [w.utilization for w in scenario.inference]

    def busy(self, index: int, ordinal: int) -> float:
        """The utilization of replica `ordinal` (1-based) of Deployment `index`."""
        drawn = self._drawn[index]
        while len(drawn) < ordinal:
            drawn.append(draw_busy(self._rngs[index], self._spreads[index]))
        return drawn[ordinal - 1]
