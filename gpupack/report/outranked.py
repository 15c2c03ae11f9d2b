"""Victims that outranked another candidate: a pod kube-scheduler preempted while another node would have taken
the preemptor with victims of lower priority only. Pure: the Events and pods are already read.

Priority is the cluster admin's statement of what may die first, and kube-scheduler's own choice among candidates
puts the lowest highest-priority victim before everything but PodDisruptionBudgets (docs/platform/
kube-scheduler-extender.md, "Preemption"). A victim that outranked another candidate's victims therefore died for
one of a few reasons: the other node's pods were guarded by a PodDisruptionBudget (kube-scheduler's first rule),
an extender's preempt verb reordered the candidates (gpupack's ranked gpupack's classes before priority until
issue 27), or an extender refused the other node (hot GPUs for a latency-critical pod) at that moment.

How the other candidate is found: the moment of the preemption (the Event's time) is replayed through
kube-scheduler's own candidate search (`gpupack.placement.choice.Placement.candidates`: its static filters, the
extender's unresolvable refusals, its dry run), with the pods that were already running then and still are (their
`status.startTime` before the Event). Each candidate then goes to the preempt verb on its own
(`extender.preemption.preempt`): a node the verb refuses whatever it costs (spot for inference, victims that free
nothing the pod can use) is no candidate, and the victims are those it keeps. Pods that have finished since are not
there, so a node that looks as if it had room is no candidate, and no claim is made for it. The extender's hot
filter is not replayed (the report has no utilization for that second), which is why the finding names the node for
the admin to check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpupack.core.objects import is_finished, priority_of, started_at
from gpupack.core.policy import Policy
from gpupack.extender.demand import DemandError, PodDemand, demand_of
from gpupack.extender.live import LiveMetrics
from gpupack.extender.preemption import Candidate, preempt, victim_rank
from gpupack.extender.state import PodRecord
from gpupack.extender.verbs import snapshot
from gpupack.placement.choice import Placement, constraints_of
from gpupack.placement.preemption import Running
from gpupack.report.cluster import Cluster, gpu_nodes_of, gpu_resources, key, requests
from gpupack.report.victims import Victim

NO_LIVE_DATA = LiveMetrics({}, 0.0, {}, 0.0, 0)
"""The replay reads no GPU utilization: the extender's hot filter is not applied (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Outranked:
    """A victim that died while another candidate's victims were all of lower priority."""

    victim: str
    """`namespace/name` of the victim."""
    priority: int
    """Its priority (its pod's, or a live pod's of its controller)."""
    node: str | None
    """Where it died."""
    preemptor: str
    """`namespace/name` of the pod it made room for."""
    other_node: str
    """The node that would have taken the preemptor with lower-priority victims."""
    other_priority: int
    """The highest priority among the victims kube-scheduler's dry run chooses there."""
    other_victims: tuple[str, ...]
    """Those victims, `namespace/name`."""
    at: float


@dataclass(frozen=True, slots=True)
class _Pending:
    """The preemptor as `Placement` reads a pending pod."""

    pod: dict[str, Any]
    demand: PodDemand
    constraints: bytes


def _running_at(
    cluster: Cluster, placement: Placement, policy: Policy, at: float, leave_out: str
) -> tuple[list[tuple[str, PodRecord]], dict[str, list[Running]]]:
    """The pods bound to the GPU nodes that had started by `at` and are still running, but `leave_out`: as the
    extender's state holds them, and as kube-scheduler's dry run reads them per node."""
    records: list[tuple[str, PodRecord]] = []
    running: dict[str, list[Running]] = {}
    for pod in cluster.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        started = started_at(pod)
        if node not in placement.records or is_finished(pod) or started is None or started > at:
            continue
        name = key(pod)
        if name == leave_out:
            continue
        asked = requests(pod, policy)
        meta = pod.get("metadata") or {}
        rank = victim_rank(meta.get("labels") or {}, meta.get("annotations") or {})
        records.append((name, PodRecord(str(node), tuple(asked.items()), True, rank, priority_of(pod), started)))
        running.setdefault(str(node), []).append(Running(name, str(node), priority_of(pod), started, asked))
    return records, running


def outranked(victims: Sequence[Victim], cluster: Cluster, policy: Policy) -> list[Outranked]:
    """The victims (of `gpupack.report.victims.preempted`) for which another candidate had only lower-priority
    victims, oldest first. A victim is judged only when its priority is known (its pod or a live pod of its
    controller) and its preemptor is still there and asks for a GPU; each preemption is replayed once."""
    by_key = {key(p): p for p in cluster.pods}
    judged = [v for v in victims if v.template is not None and v.preemptor in by_key]
    if not judged:
        return []
    placement = Placement(gpu_nodes_of(cluster, policy), policy, np.random.default_rng(0), extender=True)
    replayed: dict[tuple[str, float], dict[str, tuple[Running, ...]]] = {}
    out: list[Outranked] = []
    for victim in judged:
        assert victim.template is not None and victim.preemptor is not None  # (judged)
        preemptor = by_key[victim.preemptor]
        if not gpu_resources(preemptor, policy):
            continue
        moment = (victim.preemptor, victim.at)
        if moment not in replayed:
            replayed[moment] = _candidates(cluster, placement, policy, preemptor, victim.preemptor, victim.at)
        found = _lowest(replayed[moment], victim, priority_of(victim.template))
        if found is not None:
            out.append(found)
    return out


def _candidates(
    cluster: Cluster, placement: Placement, policy: Policy, preemptor: dict[str, Any], name: str, at: float
) -> dict[str, tuple[Running, ...]]:
    """kube-scheduler's candidates for `preemptor` at `at` that the preempt verb takes, each alone, with the
    victims it keeps; empty when the preemptor's requests cannot be read."""
    try:
        demand = demand_of(preemptor, policy)
    except DemandError:
        return {}
    records, running = _running_at(cluster, placement, policy, at, name)
    placement.state.replace_pods(records)
    pending = _Pending(preemptor, demand, constraints_of(preemptor))
    view = placement.view(NO_LIVE_DATA, recount=False)
    priority = priority_of(preemptor)
    found = placement.candidates(pending, priority, running, view, at)
    taken: dict[str, tuple[Running, ...]] = {}
    for node, victims in found.items():
        one = {node: Candidate(tuple(v.key for v in victims))}
        snap = {node: snapshot(placement.records[node], view, at, at)}
        outcome = preempt(demand, priority, one, snap, placement.state.pods, policy, measured=False, now=at)
        if node in outcome.kept:
            by_key = {v.key: v for v in victims}
            taken[node] = tuple(by_key[k] for k in outcome.kept[node].victims)
    return taken


def _lowest(candidates: Mapping[str, tuple[Running, ...]], victim: Victim, priority: int) -> Outranked | None:
    """The candidate other than the victim's node whose highest victim priority is lowest, if below `priority`."""
    others = [(max(v.priority for v in vs), node, vs) for node, vs in candidates.items() if node != victim.node]
    if not others:
        return None
    highest, node, chosen = min(others, key=lambda o: (o[0], o[1]))
    if highest >= priority:
        return None
    assert victim.preemptor is not None
    return Outranked(
        victim.pod, priority, victim.node, victim.preemptor, node, highest, tuple(v.key for v in chosen), victim.at
    )


def describe(found: Iterable[Outranked]) -> str:
    """One line per victim: who died where, for whom, and the lower-priority candidate."""
    return "; ".join(
        f"{o.victim} (priority {o.priority}) on {o.node or 'an unknown node'} for {o.preemptor}, while "
        f"{o.other_node} offered victims of priority {o.other_priority} at most ({', '.join(o.other_victims)})"
        for o in found
    )
