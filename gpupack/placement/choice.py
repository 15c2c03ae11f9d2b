"""kube-scheduler's choice of node for each pending pod, with the gpupack extender or without it: the placement
step the synthetic day (`gpupack.simulator.day.simulate`) runs every minute and the report's replay
(`gpupack.report.savings`) runs once.

One `Placement` holds the nodes (as `node_from_json` reads them), the bound pods (`extender.state.ClusterState`,
what the extender's watch would show) and kube-scheduler's static filter results, cached per pod constraints and
node. For each pod, in the scheduling queue's order, it applies kube-scheduler's own filters (node selector,
required affinity, taints, a cordoned node, resource fit: `gpupack.placement.scheduler`), then

- with the extender: its verdicts on the nodes left (`extender.verbs.judge`, the function behind `/filter` and
  `/prioritize`) and its 0..10 answers (`extender.score.priorities`);
- without it: LeastAllocated (`extender.score.spread`), nothing of gpupack;

adds them up as kube-scheduler does (`final_scores`, with preferred node affinity), breaks ties at random like
`selectHost`, and binds. A pod that fits nowhere may preempt (`Placement.preemption`: kube-scheduler's
DefaultPreemption, `gpupack.placement.preemption`, with the extender's preempt verb or without it) and is then
tried again at once; otherwise it is left pending, and the pods of its shape and constraints after it are not
tried again in the same pass, as the scheduling queue backs them off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import orjson

from gpupack.core.objects import priority_of
from gpupack.core.policy import Policy
from gpupack.extender.demand import PodDemand
from gpupack.extender.filter import reject
from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.live import LiveMetrics, NodeUtils
from gpupack.extender.preemption import Candidate, preempt, victim_rank
from gpupack.extender.score import priorities, spread
from gpupack.extender.state import ClusterState
from gpupack.extender.typical import ShapeBook
from gpupack.extender.verbs import View, judge, snapshot
from gpupack.placement.accounting import gpus_in_use
from gpupack.placement.preemption import Running, pick, select_victims
from gpupack.placement.scheduler import final_scores, fits, preferred_affinity, selects, tolerates

MAX_PREEMPTIONS_PER_TRY = 3
"""Preemptions one pod may make in one pass before it is left pending: kube-scheduler preempts again when the pod
still fits nowhere once its victims are gone (the extender refused the node they died on), each time killing at
least one pod, so the bound only keeps a pass short."""

UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""The taint kube-scheduler's NodeUnschedulable plugin checks a cordoned node's pods against."""


class Placeable(Protocol):
    """What placement reads of a pending pod."""

    @property
    def pod(self) -> dict[str, Any]:
        """The pod as stored (after the webhook, if any)."""
        ...

    @property
    def demand(self) -> PodDemand:
        """Its requests as the extender reads them."""
        ...

    @property
    def constraints(self) -> bytes:
        """`constraints_of(pod)`: pods equal here pass the same static filters."""
        ...


P = TypeVar("P", bound=Placeable)


def constraints_of(pod: Mapping[str, Any]) -> bytes:
    """Affinity, node selector and tolerations serialised: the cache key of kube-scheduler's static filters."""
    spec = pod.get("spec") or {}
    return orjson.dumps(
        [spec.get("affinity"), spec.get("nodeSelector"), spec.get("tolerations")], option=orjson.OPT_SORT_KEYS
    )


class Placement:
    """The nodes, what is bound on them, and kube-scheduler's choice for the next pod. Mutable."""

    def __init__(
        self, nodes: Sequence[dict[str, Any]], policy: Policy, rng: np.random.Generator, *, extender: bool
    ) -> None:
        self.policy = policy
        self.extender = extender
        self.rng = rng
        """Tie-breaks; the caller's generator, so a seeded run stays deterministic."""
        self.node_json = {n["metadata"]["name"]: n for n in nodes}
        self.records: dict[str, NodeRecord] = {name: node_from_json(n, policy) for name, n in self.node_json.items()}
        self.labels = {name: n["metadata"].get("labels") or {} for name, n in self.node_json.items()}
        self.state = ClusterState()
        self.state.replace_nodes(self.records.values())
        self.book = ShapeBook()
        """The typical pod shapes, re-counted from the bound pods as the extender does."""
        self.static: dict[tuple[bytes, str], bool] = {}
        self.absent: set[str] = set()
        """Nodes that do not exist now: a node autoscaler has not made them yet, or has removed them (the synthetic
        day's `autoscaling`). No filter passes them."""

    def view(self, live: LiveMetrics, *, recount: bool = True) -> View:
        """What the extender reads for one scheduling pass: the bound pods, `live` and the typical shapes
        (re-counted from the bound pods unless `recount` is false)."""
        if recount and self.extender and self.policy.extender.scoring == "gpupack":
            self.book.refresh(self.state)
        return View(self.state, live, self.policy, book=self.book)

    def live(self, work: Mapping[str, float], now: float, serial: int) -> LiveMetrics:
        """What DCGM would report at `now`: each node's work (GPUs' worth busy) spread evenly over its GPUs in use
        (`gpus_in_use`, the device plugin's packing), its other GPUs idle. `serial` must differ per snapshot."""
        summary = {name: self.node_utils(name, work.get(name, 0.0), now) for name in self.records}
        return LiveMetrics({}, now, summary, now, serial)

    def node_utils(self, name: str, work: float, now: float) -> NodeUtils:
        """One node's part of `live`."""
        record = self.records[name]
        in_use = gpus_in_use(record, self.state.used(name, now))
        util = min(work / in_use, 1.0) if in_use else 0.0
        return NodeUtils((util,) * in_use + (0.0,) * max(record.gpu_count - in_use, 0), now)

    def statically_ok(self, pending: Placeable, name: str) -> bool:
        """kube-scheduler's node selector, required affinity and taint filters (cached per constraints and node);
        never on an absent node."""
        if name in self.absent:
            return False
        return self.could_take(pending, name)

    def could_take(self, pending: Placeable, name: str) -> bool:
        """The static filters alone, whether the node exists or not: what an autoscaler asks of a node it could
        make (the node selector, affinity and taints of the group's nodes)."""
        key = (pending.constraints, name)
        found = self.static.get(key)
        if found is None:
            spec = self.node_json[name].get("spec") or {}
            taints = list(spec.get("taints") or [])
            if spec.get("unschedulable"):  # NodeUnschedulable: a cordoned node, unless the pod tolerates it
                taints.append(UNSCHEDULABLE)
            found = selects(pending.pod, self.labels[name]) and tolerates(pending.pod, taints)
            self.static[key] = found
        return found

    def choose(self, pending: Placeable, view: View, now: float) -> str | None:
        """The node kube-scheduler would bind the pod to, or None when no node passes every filter."""
        requests = pending.demand.requests
        candidates = [
            record
            for name, record in self.records.items()
            if self.statically_ok(pending, name) and fits(requests, record.allocatable, self.state.used(name))
        ]
        answered = (self.extender_ranks if self.extender else self.least_allocated)(pending, candidates, view, now)
        if len(answered) <= 1:  # kube-scheduler skips scoring with one feasible node
            return next(iter(answered), None)
        totals = final_scores(answered, {n: preferred_affinity(pending.pod, self.labels[n]) for n in answered})
        best = max(totals.values())
        ties = [n for n, total in totals.items() if total == best]
        return ties[int(self.rng.integers(len(ties)))] if len(ties) > 1 else ties[0]

    def passes(self, pending: Placeable, name: str, view: View, now: float) -> bool:
        """Whether `name` passes every filter for the pod: kube-scheduler's, then the extender's (kube-scheduler's
        check of a preemptor's nominated node, which it binds to without scoring when it passes)."""
        record, demand = self.records[name], pending.demand
        if not self.statically_ok(pending, name) or not fits(
            demand.requests, record.allocatable, self.state.used(name)
        ):
            return False
        return not self.extender or reject(demand, snapshot(record, view, now, now), self.policy) is None

    def extender_ranks(
        self, pending: Placeable, candidates: list[NodeRecord], view: View, now: float
    ) -> dict[str, int]:
        """With the gpupack extender: its verdicts (`judge`, what `/filter` and `/prioritize` answer) on the nodes
        kube-scheduler's filters passed, and its 0..10 answers for those it does not filter out."""
        found = judge(pending.demand, [snapshot(r, view, now, now) for r in candidates], self.policy, view.book)
        passed = {r.name: v.score for r, v in zip(candidates, found, strict=True) if v.rejection is None}
        return dict(zip(passed, priorities(list(passed.values()), self.policy), strict=True))

    def least_allocated(
        self, pending: Placeable, candidates: list[NodeRecord], view: View, now: float
    ) -> dict[str, int]:
        """Without gpupack: no extender is called, so no node is filtered out beyond kube-scheduler's own filters,
        and each is scored by LeastAllocated (the `spread` function, 0..10, on the free fractions left).

        kube-scheduler's own plugin ranks differently, though not which nodes a pod may go to: it scores cpu and
        memory only, counting 100m and 200Mi for a pod that requests none, which also puts empty nodes first and
        nodes in use nearly level; PodTopologySpread and ImageLocality are not modelled. In the synthetic day the
        on-demand nodes, the only ones a pod without a spot toleration may use, are full all day, so the
        ranking changes little."""
        return {r.name: spread(pending.demand, snapshot(r, view, now, now)) for r in candidates}

    def candidates(
        self,
        pending: Placeable,
        priority: int,
        running: Mapping[str, Sequence[Running]],
        view: View,
        now: float,
    ) -> dict[str, tuple[Running, ...]]:
        """kube-scheduler's preemption candidates for a pod that fits nowhere, each node with the victims its dry
        run chooses there (`gpupack.placement.preemption.select_victims`), before any extender is asked.
        `running` holds the bound pods per node.

        A node kube-scheduler's static filters rule out is unresolvable; a node whose resources fit the pod was
        refused by the extender, a candidate only when the refusal is resolvable; a node that failed the fit was
        never sent to the extender, so it is a candidate whatever the extender would say of it."""
        demand = pending.demand
        requests = demand.requests
        found: dict[str, tuple[Running, ...]] = {}
        for name, record in self.records.items():
            if not self.statically_ok(pending, name):
                continue
            used = self.state.used(name)
            if fits(requests, record.allocatable, used):
                rejection = reject(demand, snapshot(record, view, now, now), self.policy) if self.extender else None
                if rejection is None or rejection.unresolvable:
                    continue
            victims = select_victims(requests, priority, record.allocatable, used, running.get(name, ()))
            if victims:
                found[name] = victims
        return found

    def preemption(
        self,
        pending: Placeable,
        priority: int,
        running: Mapping[str, Sequence[Running]],
        view: View,
        now: float,
        *,
        verb: bool,
    ) -> tuple[str, tuple[Running, ...]] | None:
        """Where kube-scheduler preempts for a pod that fits nowhere, and the victims it deletes there; None when it
        finds no candidate (`candidates`; `gpupack.placement.preemption` says how). `verb`: the extender answers
        kube-scheduler's preempt verb (`extender.preemption.preempt`, the function behind `POST /preempt`), as the
        shipped configuration has it."""
        candidates = self.candidates(pending, priority, running, view, now)
        if verb and self.extender and candidates:
            outcome = preempt(
                pending.demand,
                priority,
                {name: Candidate(tuple(v.key for v in victims)) for name, victims in candidates.items()},
                {name: snapshot(self.records[name], view, now, now) for name in candidates},
                self.state.pods,
                self.policy,
                view.live.newest() is not None,
                now=now,
            )
            by_key = {v.key: v for victims in candidates.values() for v in victims}
            candidates = {name: tuple(by_key[k] for k in kept.victims) for name, kept in outcome.kept.items()}
        node = pick(candidates, self.rng)
        return None if node is None else (node, candidates[node])

    def bind(self, pending: Placeable, node: str, now: float | None = None) -> None:
        """The pod is bound to `node` and starts at `now` (None: a start the caller does not model): counted in the
        state the next choices read, with what losing it would cost (its priority, `victim_rank` and start, read by
        the preempt verb)."""
        meta = pending.pod.get("metadata") or {}
        rank = victim_rank(meta.get("labels") or {}, meta.get("annotations") or {})
        requests = tuple(pending.demand.requests.items())
        priority = priority_of(pending.pod)
        self.state.upsert_pod(pending.demand.key, node, requests, rank=rank, priority=priority, started=now)

    def place(
        self,
        queue: Iterable[P],
        view: View,
        now: float,
        bind: Callable[[P, str], None],
        preempt: Callable[[P], str | None] | None = None,
    ) -> list[P]:
        """Choose a node for each pod of `queue` in order and call `bind` with it (which must call `self.bind`);
        returns the pods left pending. A pod that fits nowhere is handed to `preempt`, which deletes victims and
        returns the node it nominated (None: no preemption, see `preemption`); the pod is then tried again at
        once, with the same live data (the victims are gone within seconds, long before a utilization window
        moves), on its nominated node first as kube-scheduler does. A shape that failed is not tried again in
        the pass."""
        failed: set[tuple[object, ...]] = set()
        left: list[P] = []
        for pending in queue:
            shape = (pending.demand.shape, pending.constraints)
            node = None if shape in failed else self.choose(pending, view, now)
            tries = 0
            while node is None and preempt is not None and shape not in failed and tries < MAX_PREEMPTIONS_PER_TRY:
                tries += 1
                nominated = preempt(pending)
                if nominated is None:
                    break
                node = nominated if self.passes(pending, nominated, view, now) else self.choose(pending, view, now)
            if node is None:
                failed.add(shape)
                left.append(pending)
                continue
            bind(pending, node)
        return left
