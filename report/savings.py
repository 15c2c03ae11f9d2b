"""What gpupack would do with the cluster as it is: its GPU pods replayed through the webhook's `plan()` and the
extender's placement (`simulator.placement`, the synthetic day's own step) on its GPU nodes, giving the nodes they
would need and the nodes Cluster Autoscaler could then remove.

The replay admits each GPU pod (running or pending; not DaemonSet pods, which run on every node anyway) as its
developer would write it after following the report's advice: the pod as stored, unbound, with the labels the
`oversized-workload` finding names (`report.findings.sizing.resizes`) and without the whole GPUs they replace.
Every pod then goes through the webhook's `plan()` in enforce mode (the replay shows what gpupack would do, also
when the shipped policy audits), so a pod without gpupack labels keeps what it asks. The pods are placed in the
scheduling queue's order (priority, then creation time) on the GPU nodes by kube-scheduler's filters and the
extender's verdicts under the policy's scoring. Live utilization is not replayed: the extender judges the nodes
by what the replayed pods hold, as it does for a node whose DCGM series are missing.

Not replayed: pods without GPUs on the GPU nodes (they would move to CPU nodes), and what keeps a node from being
removed (`scale-down-blocker` findings say that). Pods the webhook denies keep their stored form.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.demand import DemandError, PodDemand, demand_of
from extender.inventory import node_from_json
from extender.live import LiveMetrics
from gpupack import contract
from gpupack.kube import facts_from_lists
from gpupack.policy import Policy
from report.cluster import Cluster, ClusterError, gpu_resources, is_daemonset_pod, key, labels_of
from report.document import Savings
from report.findings.inputs import Inputs
from report.findings.sizing import resizes
from simulator.placement import Placement, constraints_of
from webhook.mutate import MutationContext, plan
from webhook.patches import apply_patch

NO_LIVE = LiveMetrics({}, 0.0)
"""No DCGM data in the replay: the extender judges nodes by allocation alone."""
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Replayed:
    """One pod of the replay, as `simulator.placement` reads it."""

    pod: dict[str, Any]
    demand: PodDemand
    constraints: bytes
    priority: int
    created: str
    name: str


def unbound(pod: Mapping[str, Any], labels: Mapping[str, str] | None) -> dict[str, Any]:
    """The pod as it would be created again: no node, no status, and with `labels` (the advice) added and the
    whole GPUs they replace removed from its containers. The input is not modified."""
    out = copy.deepcopy(dict(pod))
    out.pop("status", None)
    spec = out.setdefault("spec", {})
    spec.pop("nodeName", None)
    if labels:
        meta = out.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                if isinstance(resources.get(part), dict):
                    resources[part].pop(contract.RESOURCE_GPU, None)
    return out


def gpu_pods(cluster: Cluster, inputs: Inputs) -> list[dict[str, Any]]:
    """The pods the replay places: asking for a GPU resource, not finished, not a DaemonSet's."""
    return [
        p
        for p in cluster.pods
        if (p.get("status") or {}).get("phase") not in FINISHED
        and not is_daemonset_pod(p)
        and gpu_resources(p, inputs.policy)
    ]


def gpu_nodes_of(cluster: Cluster, policy: Policy) -> list[dict[str, Any]]:
    """The nodes advertising a GPU resource (only they can take the replayed pods). Raises ClusterError naming
    the node whose object the extender cannot read."""
    out = []
    for node in cluster.nodes:
        try:
            record = node_from_json(node, policy)
        except ValueError as exc:
            raise ClusterError(f"{cluster.source}: {exc}") from exc
        if record.gpu_resources:
            out.append(node)
    return out


def savings(inputs: Inputs) -> Savings | None:
    """The replay's answer, None without a cluster."""
    cluster = inputs.cluster
    if cluster is None:
        return None
    policy = inputs.policy.model_copy(update={"mode": "enforce"})
    advice = {key(p): r.labels for r in resizes(inputs) for p in r.pods}
    nodes = gpu_nodes_of(cluster, policy)
    placement = Placement(nodes, policy, np.random.default_rng(0), extender=True)
    gpu_nodes = sorted(placement.records)
    context = MutationContext(policy, "report", facts_from_lists(None, {"items": nodes}))
    queue: list[Replayed] = []
    unplaced: list[str] = []
    for stored in gpu_pods(cluster, inputs):
        raw = unbound(stored, advice.get(key(stored)))
        decision = plan(raw, (raw.get("metadata") or {}).get("namespace"), context)
        pod = apply_patch(raw, decision.ops) if decision.allowed else unbound(stored, None)
        try:
            demand = demand_of(pod, policy)
        except DemandError:
            unplaced.append(key(stored))
            continue
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        queue.append(
            Replayed(
                pod,
                demand,
                constraints_of(pod),
                int(spec.get("priority") or 0),
                str(meta.get("creationTimestamp") or ""),
                key(stored),
            )
        )
    queue.sort(key=lambda r: (-r.priority, r.created, r.name))
    used: set[str] = set()

    def bind(replayed: Replayed, node: str) -> None:
        placement.bind(replayed, node)
        used.add(node)

    left = placement.place(queue, placement.view(NO_LIVE), 0.0, bind)
    unplaced += [r.name for r in left]
    removable = [n for n in gpu_nodes if n not in used]
    hours = inputs.usage.window.hours
    gpu_hours = sum(placement.records[n].gpu_count for n in removable) * hours
    return Savings(
        gpu_nodes_now=len(gpu_nodes),
        gpu_nodes_needed=len(used),
        removable=tuple(removable),
        removable_gpu_hours=gpu_hours,
        removable_cost=_cost(inputs, cluster, removable, placement.records, hours),
        unplaced=tuple(sorted(unplaced)),
    )


def _cost(
    inputs: Inputs, cluster: Cluster, nodes: Iterable[str], records: Mapping[str, Any], hours: float
) -> float | None:
    """What the removable nodes' GPUs cost over the window; None without prices or when one has no price."""
    if inputs.prices is None:
        return None
    total = 0.0
    for name in nodes:
        price = inputs.price(name)
        if price is None:
            node = cluster.node_by_name.get(name) or {}
            price = inputs.prices.per_gpu_hour(labels_of(node).get("nvidia.com/gpu.product"), inputs.spot(name))
        if price is None:
            return None
        total += price * records[name].gpu_count * hours
    return total
