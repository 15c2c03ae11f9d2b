"""The preempt verb's decision: which of kube-scheduler's preemption candidates would really take the pod, the
fewest victims it needs there, and which candidates cost least.

kube-scheduler's dry run picks, per node, the lowest-priority pods whose removal makes its own plugins pass
(docs/platform/kube-scheduler-extender.md, "Preemption"). It knows nothing of what the extender refuses, so
without this verb it kills victims on a node the extender then refuses (a hot GPU), and tries again elsewhere:
the first victims died for nothing. Asked before any victim is deleted, this decides per candidate node:

- dropped when the extender's own verdict, with every victim gone, still refuses the pod (`filter.reject`: no
  free unit of its GPU resource, a spot node it must not use, every GPU hot for a latency-critical pod, since a
  5-minute utilization window cannot cool before the retry), when the node's CPU or memory still do not fit,
  when the extender does not know the node, or when a latency-critical pod would land on a node with no fresh
  GPU data while the extender reads live data (it cannot tell that the node is not hot);
- otherwise a victim that holds none of the pod's GPU resource goes back, most important first, while the pod still
  fits without it (CPU and memory included): it would die freeing nothing the pod can use. Victims holding the
  pod's GPU resource stay as kube-scheduler counted them: its dry run already gives back every one the pod does
  not need, and it counts the pods nominated to the node, which the extender cannot see (giving one back
  there left a preemptor without room, seen on a real kube-scheduler);
- then ranked by what its victims cost (`candidate_cost`): first the highest victim priority, as kube-scheduler
  ranks (a candidate whose most important victim outranks another candidate's is never chosen, whatever the
  classes say: priority is the cluster admin's own statement of what may die first); within equal priority,
  gpupack's classes (batch before checkpointing training before training that does not checkpoint before
  anything else), then fewer PodDisruptionBudget violations, then fewer GPU-hours of work lost (the GPUs' worth
  each victim holds times the hours it has run: kube-scheduler's own last rule, the latest start, says the same
  of equal victims, and a 2-GPU job three hours in loses more than a 4-GPU job five minutes in). The dominated
  candidates are dropped; kube-scheduler still chooses among those left. kube-scheduler puts PDB violations
  first; why gpupack puts them after priority is in docs/admins/placement.md ("Preemption").

A victim the extender's cache does not know (bound since its last event) is kept as the scheduler chose it: its
requests are unknown, so giving it back could leave the pod without room. Its priority is unknown too, so it is
counted at the highest kube-scheduler could have chosen, one below the preemptor's, of unknown class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from gpupack.core import contract
from gpupack.core.policy import Policy
from gpupack.extender.demand import PodDemand
from gpupack.extender.filter import reject
from gpupack.extender.snapshot import NodeSnapshot
from gpupack.extender.state import PodRecord

RANK_BATCH: Final = 0
RANK_CHECKPOINTED: Final = 1
RANK_TRAINING: Final = 2
RANK_OTHER: Final = 3
RANK_NAMES: Final = ("batch", "checkpointing training", "training", "other")
"""What a victim is, cheapest first: batch work is made to be lost, checkpointing training resumes where it
stopped, other training starts over, and a pod outside gpupack's classes is of unknown worth."""


def victim_rank(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> int:
    """What losing the pod costs (`RANK_NAMES`), from the class the webhook wrote, else the workload label."""
    workload = annotations.get(contract.ANNOTATION_CLASS) or labels.get(contract.LABEL_WORKLOAD)
    if workload == "batch":
        return RANK_BATCH
    if workload == "training":
        return RANK_CHECKPOINTED if labels.get(contract.LABEL_CHECKPOINT) == "true" else RANK_TRAINING
    return RANK_OTHER


class Cost(NamedTuple):
    """What one candidate's victims cost, compared field by field (lower is cheaper)."""

    priority: int
    """The highest priority among the victims (kube-scheduler's `pickOneNodeForPreemption`, its second rule)."""
    rank: int
    """The costliest class among the victims of that priority (`RANK_NAMES`)."""
    at_worst: int
    """Victims of that priority and that class."""
    pdb_violations: int
    work: float
    """GPU-hours of work the victims lose (`_work`)."""


def candidate_cost(victims: Iterable[tuple[int, int]], pdb_violations: int, work: float) -> Cost:
    """The cost of a candidate whose victims are `(priority, rank)` pairs: the costliest pair, how many victims
    share it, then the PDB violations and the work. The one ranking of candidates: the preempt verb, the synthetic
    day and the report's findings all go through it."""
    pairs = list(victims)
    worst = max(pairs, default=(0, RANK_BATCH))
    return Cost(worst[0], worst[1], pairs.count(worst), pdb_violations, round(work, 6))


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node kube-scheduler proposes, with the victims it chose there (by pod uid)."""

    victims: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class Kept:
    """A candidate the pod would take, with the victims it needs there and what they cost."""

    victims: tuple[str, ...]
    pdb_violations: int
    cost: Cost


@dataclass(frozen=True, slots=True)
class Dropped:
    """A candidate left out, and why (`kind` is a stable name for metrics)."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class PreemptOutcome:
    """The verb's answer, and what it changed."""

    kept: Mapping[str, Kept]
    dropped: Mapping[str, Dropped]
    trimmed: int
    """Victims given back: proposed by kube-scheduler, not needed by the pod."""


def without(snap: NodeSnapshot, victims: Sequence[PodRecord]) -> NodeSnapshot:
    """The node as it is once `victims` are gone (their GPUs' utilization stays: the window cannot cool in time)."""
    used = dict(snap.used)
    for victim in victims:
        for resource, n in victim.requests:
            used[resource] = used.get(resource, 0) - n
    return NodeSnapshot(snap.node, used, snap.utils, (), max(snap.pods - len(victims), 0))


def _refusal(demand: PodDemand, snap: NodeSnapshot, policy: Policy) -> Dropped | None:
    """Why the pod still cannot take the node, or None."""
    rejection = reject(demand, snap, policy)
    if rejection is not None:
        return Dropped(rejection.kind, rejection.reason)
    for resource, n in demand.requests.items():
        if resource in snap.node.allocatable and snap.free(resource) < n:
            return Dropped("insufficient", f"{snap.free(resource)} {resource} free, pod needs {n}")
    return None


def _work(victims: Sequence[PodRecord], snap: NodeSnapshot, now: float) -> float:
    """GPU-hours of work the victims lose: the GPUs' worth each holds times the hours it has run (0 for one not
    started yet). For a pod that checkpoints this is an upper bound: it loses only what it did since its last
    checkpoint, which the extender cannot see."""
    shares = snap.node.shares
    hours = [(v, max(now - v.started, 0.0) / 3600) for v in victims if v.started is not None]
    return sum(n * shares[r] * ran for v, ran in hours for r, n in v.requests if r in shares)


def preempt(
    demand: PodDemand,
    priority: int,
    candidates: Mapping[str, Candidate],
    snapshots: Mapping[str, NodeSnapshot],
    pods: Mapping[str, PodRecord],
    policy: Policy,
    measured: bool,
    now: float,
) -> PreemptOutcome:
    """Decide on every candidate (see the module docstring). `priority` is the preemptor's, `snapshots` the
    candidates' nodes as the extender sees them (absent: a node it does not know), `pods` the bound pods by key,
    `measured` whether the extender reads live GPU data at all, `now` the time on the pods' `started` clock."""
    kept: dict[str, Kept] = {}
    dropped: dict[str, Dropped] = {}
    trimmed = 0
    for name, candidate in candidates.items():
        snap = snapshots.get(name)
        if snap is None:
            dropped[name] = Dropped("unknown-node", "the extender does not know the node")
            continue
        if demand.latency_critical and measured and not snap.utils:
            dropped[name] = Dropped("unmeasured", "no fresh GPU data: the node may be hot")
            continue
        known = [uid for uid in candidate.victims if (p := pods.get(uid)) is not None and p.node == name]
        unknown = tuple(uid for uid in candidate.victims if uid not in known)
        freed = without(snap, [pods[uid] for uid in known])
        there = demand.on(snap.node.allocatable, freed.used)  # a claim pod: the device it would take there
        refusal = _refusal(there, freed, policy)
        if refusal is not None:
            dropped[name] = refusal
            continue
        needed = list(known)
        spare = [u for u in known if not any(r == there.gpu_resource for r, _ in pods[u].requests)]
        for uid in sorted(
            spare, key=lambda u: (pods[u].priority, pods[u].rank, _work([pods[u]], snap, now)), reverse=True
        ):
            fewer = [v for v in needed if v != uid]
            if not fewer and not unknown:
                break  # a candidate with no victim is dropped by kube-scheduler: it needs at least one
            if _refusal(there, without(snap, [pods[v] for v in fewer]), policy) is None:
                needed = fewer
        trimmed += len(known) - len(needed)
        records = [pods[uid] for uid in needed]
        pairs = [(p.priority, p.rank) for p in records] + [(priority - 1, RANK_OTHER)] * len(unknown)
        cost = candidate_cost(pairs, candidate.pdb_violations, _work(records, snap, now))
        kept[name] = Kept((*unknown, *needed), candidate.pdb_violations, cost)
    if kept:
        cheapest = min(k.cost for k in kept.values())
        for name in [n for n, k in kept.items() if k.cost != cheapest]:
            dropped[name] = Dropped(
                "costlier", f"victims cost {_describe(kept[name].cost)}, another candidate {_describe(cheapest)}"
            )
            del kept[name]
    return PreemptOutcome(kept, dropped, trimmed)


def _describe(cost: Cost) -> str:
    return (
        f"{cost.at_worst} {RANK_NAMES[cost.rank]} pod(s) at priority {cost.priority}, "
        f"{cost.pdb_violations} PDB violation(s), {cost.work:g} GPU-hours of work"
    )
