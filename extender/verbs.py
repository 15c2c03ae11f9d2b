"""The two verbs over a list of candidate nodes: filter and prioritize, and the assumption they leave.

Nodes come from the request when the scheduler sends them in full (its view wins: it is what Cluster
Autoscaler simulates), else from the watch cache. A name the cache does not know (a node added since the
last event) passes the filter and scores 0: the scheduler has already checked that the pod fits there.

After ranking, the best node is assumed for the pod (see `extender.state`); when the filter leaves exactly one
node, kube-scheduler does not call prioritize, so the filter assumes that node itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from extender.demand import PodDemand
from extender.filter import reject
from extender.inventory import NodeRecord, node_from_json
from extender.live import LiveMetrics
from extender.score import score
from extender.snapshot import NodeSnapshot
from extender.state import ClusterState
from extender.wire import ArgsError, ExtenderArgs
from gpupack.policy import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class View:
    """What the verbs read: the cluster state, the live metrics and the policy in force."""

    state: ClusterState
    live: LiveMetrics
    policy: Policy


@dataclass(slots=True)
class FilterOutcome:
    """Nodes kept, and the reason for each node removed (resolvable by preemption or not)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)
    """The kind of each rejection (for the filter-reason counter)."""


def _records(args: ExtenderArgs, view: View) -> list[tuple[str, NodeRecord | None]]:
    if args.nodes is None:
        nodes = view.state.nodes
        return [(name, nodes.get(name)) for name in args.names]
    out: list[tuple[str, NodeRecord | None]] = []
    for node in args.nodes:
        try:
            record = node_from_json(node, view.policy)
        except ValueError as exc:
            raise ArgsError(f"ExtenderArgs.Nodes: {exc}") from exc
        out.append((record.name, record))
    return out


def snapshot(record: NodeRecord, view: View, now: float, wall: float) -> NodeSnapshot:
    """One node with its usage (bound + assumed) and fresh GPU utilizations."""
    max_age = view.policy.extender.metrics.max_age_seconds
    return NodeSnapshot(record, view.state.used(record.name, now), view.live.fresh_utils(record.name, wall, max_age))


def filter_nodes(demand: PodDemand, args: ExtenderArgs, view: View) -> FilterOutcome:
    """Apply `extender.filter.reject` to each candidate. Raises ArgsError for unreadable full Nodes."""
    now, wall = time.monotonic(), time.time()
    outcome = FilterOutcome()
    for name, record in _records(args, view):
        if record is None:
            outcome.passed.append(name)
            continue
        rejection = reject(demand, snapshot(record, view, now, wall), view.policy)
        if rejection is None:
            outcome.passed.append(name)
            continue
        outcome.kinds.append(rejection.kind)
        if rejection.unresolvable:
            outcome.unresolvable[name] = rejection.reason
        else:
            outcome.failed[name] = rejection.reason
    if len(outcome.passed) == 1 and demand.gpu_resource is not None:
        _assume(demand, outcome.passed[0], view, now)
    return outcome


def prioritize_nodes(demand: PodDemand, args: ExtenderArgs, view: View) -> list[tuple[str, int]]:
    """Score each candidate 0..10 and assume the pod on the best one (the first of equals)."""
    now, wall = time.monotonic(), time.time()
    scores: list[tuple[str, int]] = []
    for name, record in _records(args, view):
        value = 0 if record is None else score(demand, snapshot(record, view, now, wall), view.policy)
        scores.append((name, value))
    if scores and demand.gpu_resource is not None:
        best = max(scores, key=lambda s: s[1])[0]
        _assume(demand, best, view, now)
    return scores


def _assume(demand: PodDemand, node: str, view: View, now: float) -> None:
    view.state.assume(demand.key, node, demand.requests, view.policy.extender.assume_seconds, now)
    log.debug("assumed pod=%s node=%s", demand.key, node)


def describe_state(view: View, now: float | None = None) -> dict[str, Any]:
    """What the extender believes about each node, for `GET /state`."""
    mono, wall = time.monotonic(), now or time.time()
    max_age = view.policy.extender.metrics.max_age_seconds
    nodes: dict[str, Any] = {}
    for name, record in sorted(view.state.nodes.items()):
        used = view.state.used(name, mono)
        gpus = view.live.nodes.get(name, {})
        nodes[name] = {
            "gpuModel": record.gpu_model,
            "product": record.product,
            "gpus": record.gpu_count,
            "spot": record.spot,
            "free": {r: record.allocatable[r] - used.get(r, 0) for r in record.gpu_resources},
            "allocatable": {r: record.allocatable[r] for r in record.gpu_resources},
            "gpuUsed": round(NodeSnapshot(record, used).gpu_used, 3),
            "utilization": {
                index: {
                    "util": None if g.util is None else round(g.util, 3),
                    "ageSeconds": round(wall - g.at, 1) if g.at else None,
                    "fresh": g.util is not None and wall - g.at <= max_age,
                    "pods": sorted(g.pods),
                }
                for index, g in sorted(gpus.items())
            },
        }
    return {
        "synced": view.state.synced,
        "scoring": view.policy.extender.scoring,
        "metricsReadAt": view.live.read_at or None,
        "pods": len(view.state.pods),
        "assumed": view.state.assumed_count(),
        "nodes": nodes,
    }
