"""What gpupack would do with the cluster as it is: its GPU pods replayed through the webhook's `plan()` and the
extender's placement (`gpupack.placement.choice`, the synthetic day's own step) on its GPU nodes, giving the nodes they
would need and the nodes Cluster Autoscaler could then remove.

The replay admits each GPU pod (running or pending; not DaemonSet pods, which run on every node anyway) as its developer
would write it after following the report's advice: the pod as stored, unbound, with the labels the `oversized-workload`
finding names (`gpupack.report.findings.sizing.resizes`) and without the whole GPUs they replace. Every pod then goes
through the webhook's `plan()` in enforce mode (the replay shows what gpupack would do, also when the shipped policy
audits), so a pod without gpupack labels keeps what it asks. The pods are placed in the scheduling queue's order
(priority, then creation time) on the GPU nodes by kube-scheduler's filters and the extender's verdicts under the
policy's scoring, one at a time, each pod seeing the utilization the pods placed before it bring (`Placement.live`, the
synthetic day's DCGM model): a pod's work is what the window measured of it (`pod_work`), so the extender's hot filter
and utilization scores see the load moving. What the replay gives each node is then checked against what its GPUs can
do: `overloaded` names the nodes given more work than GPUs, where the saving is not real, and `util_after` is the
guide's (docs/method.md) "after" number, the mean utilization of the GPUs in use.

Not replayed: pods without GPUs on the GPU nodes (they would move to CPU nodes), and what keeps a node from being
removed (`scale-down-blocker` findings say that). Pods the webhook denies keep their stored form.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpupack.core import contract
from gpupack.core.gpus.catalog import compute_share, mig_model_of
from gpupack.core.kube import facts_from_lists
from gpupack.core.objects import GFD_PRODUCT, is_daemonset_pod, is_finished, labels_of, priority_of
from gpupack.extender.demand import DemandError, PodDemand, demand_of
from gpupack.extender.inventory import NodeRecord
from gpupack.extender.live import LiveMetrics
from gpupack.extender.typical import REFRESH_PODS
from gpupack.placement.accounting import gpus_in_use
from gpupack.placement.choice import Placement, constraints_of
from gpupack.report.cluster import Cluster, gpu_nodes_of, gpu_resources, key
from gpupack.report.document import Savings
from gpupack.report.findings.inputs import Inputs
from gpupack.report.findings.sizing import resizes
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch


@dataclass(frozen=True, slots=True)
class Replayed:
    """One pod of the replay, as `gpupack.placement.choice` reads it."""

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
        p for p in cluster.pods if not is_finished(p) and not is_daemonset_pod(p) and gpu_resources(p, inputs.policy)
    ]


def pod_work(inputs: Inputs, records: Mapping[str, NodeRecord], pods: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Each pod's work over the window in GPUs' worth busy (0.3: a third of one GPU all the time), by `key`; a pod
    the window does not measure is left out.

    With the exporter's pod mapping (DCGM), a pod does its GPUs' utilization, shared evenly with the other pods mapped
    to the same GPU; a MIG instance's is its engine activity times its compute share of the GPU (`compute_share`: of 4
    slices on an A30, of 7 on the others). Without it (nvidia-smi), a node's work (its GPUs' utilizations summed) is
    shared among its GPU pods by how much of a GPU
    each holds (a whole GPU 1, a time-sliced replica 1/replicas, a MIG instance its slices)."""
    metric = inputs.usage.metric
    wanted = {key(p): p for p in pods}
    out: dict[str, float] = {}
    if any(g.pods for g in inputs.usage.gpus):
        for gpu in inputs.usage.gpus:
            mine = [k for k in gpu.pods if k in wanted]
            util = gpu.engine_mean if gpu.instance is not None else gpu.utilization(metric)
            if not mine or util is None:
                continue
            share = compute_share(gpu.profile or "", mig_model_of(gpu.model or "")) if gpu.instance is not None else 1.0
            for k in mine:
                out[k] = out.get(k, 0.0) + util / 100 * share / len(gpu.pods)
        return out
    held: dict[str, dict[str, float]] = {}
    for k, pod in wanted.items():
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        record = records.get(node)
        if record is None:
            continue
        requests = gpu_resources(pod, inputs.policy)
        held.setdefault(node, {})[k] = sum(n * record.shares.get(r, 0.0) for r, n in requests.items())
    for node, pods_held in held.items():
        usage = inputs.nodes.get(node)
        total = sum(pods_held.values())
        if usage is None or usage.util_mean is None or total <= 0:
            continue
        work = usage.util_mean / 100 * usage.gpus
        out.update({k: work * h / total for k, h in pods_held.items()})
    return out


def held_gpus(record: NodeRecord, used: Mapping[str, int]) -> int:
    """Physical GPUs holding a replayed pod: the device plugin's packing (`gpus_in_use`), at least the GPUs'
    worth the pods hold when the node's GPU count is not labelled (a MIG node without `nvidia.com/gpu.count`)."""
    worth = sum(n * record.shares.get(r, 0.0) for r, n in used.items() if r in record.shares)
    return max(gpus_in_use(record, used), math.ceil(worth - 1e-9))


def savings(inputs: Inputs) -> Savings | None:
    """The replay's answer, None without a cluster."""
    cluster = inputs.cluster
    if cluster is None:
        return None
    policy = inputs.policy.model_copy(update={"mode": "enforce"})
    advice = {key(p): r.labels for r in resizes(inputs) for p in r.pods}
    nodes = gpu_nodes_of(cluster, policy)
    placement = Placement(nodes, policy, np.random.default_rng(0), extender=True)
    context = MutationContext(policy, "report", facts_from_lists(None, {"items": nodes}))
    stored_pods = gpu_pods(cluster, inputs)
    measured = pod_work(inputs, placement.records, stored_pods)
    queue: list[Replayed] = []
    unplaced: list[str] = []
    for stored in stored_pods:
        raw = unbound(stored, advice.get(key(stored)))
        decision = plan(raw, (raw.get("metadata") or {}).get("namespace"), context)
        pod = apply_patch(raw, decision.ops) if decision.allowed else unbound(stored, None)
        try:
            demand = demand_of(pod, policy)
        except DemandError:
            unplaced.append(key(stored))
            continue
        meta = pod.get("metadata") or {}
        queue.append(
            Replayed(
                pod,
                demand,
                constraints_of(pod),
                priority_of(pod),
                str(meta.get("creationTimestamp") or ""),
                key(stored),
            )
        )
    queue.sort(key=lambda r: (-r.priority, r.created, r.name))
    work: dict[str, float] = {}
    utils = dict(placement.live(work, 0.0, 0).summary)
    """The live utilizations the next pod sees: only the node a pod was bound to changes."""

    def bind(replayed: Replayed, node: str) -> None:
        placement.bind(replayed, node)
        work[node] = work.get(node, 0.0) + measured.get(replayed.name, 0.0)
        utils[node] = placement.node_utils(node, work[node], 0.0)

    since = 0
    for serial, replayed in enumerate(queue, 1):
        recount = serial == 1 or since >= max(REFRESH_PODS, serial // 20)  # as the extender re-counts its shapes
        since = 0 if recount else since + 1
        view = placement.view(LiveMetrics({}, 0.0, dict(utils), 0.0, serial), recount=recount)
        unplaced += [r.name for r in placement.place([replayed], view, 0.0, bind)]
    gpu_nodes = sorted(placement.records)
    in_use = {n: held_gpus(placement.records[n], placement.state.used(n)) for n in gpu_nodes}
    used = [n for n in gpu_nodes if in_use[n]]
    removable = [n for n in gpu_nodes if not in_use[n]]
    hours = inputs.usage.window.hours
    held = sum(in_use.values())
    return Savings(
        gpu_nodes_now=len(gpu_nodes),
        gpu_nodes_needed=len(used),
        removable=tuple(removable),
        removable_gpu_hours=sum(placement.records[n].gpu_count for n in removable) * hours,
        removable_cost=_cost(inputs, cluster, removable, placement.records, hours),
        unplaced=tuple(sorted(unplaced)),
        util_after=100 * sum(min(work.get(n, 0.0), in_use[n]) for n in used) / held if held else None,
        overloaded=tuple(n for n in used if work.get(n, 0.0) > in_use[n] + 1e-9),
        unmeasured_pods=sum(1 for r in queue if r.name not in measured),
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
            price = inputs.prices.per_gpu_hour(labels_of(node).get(GFD_PRODUCT), inputs.spot(name) is not None)
        if price is None:
            return None
        total += price * records[name].gpu_count * hours
    return total
