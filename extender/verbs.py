"""The two verbs over a list of candidate nodes: filter and prioritize, and the assumption they leave.

Nodes come from the request when the scheduler sends them in full (its view wins: it is what Cluster
Autoscaler simulates), else from the watch cache. A name the cache does not know (a node added since the
last event) passes the filter and scores 0: the scheduler has already checked that the pod fits there.

After ranking, the best node where the pod fits is assumed for the pod (see `extender.state`); when the filter
leaves exactly one node, kube-scheduler does not call prioritize, so the filter assumes that node itself. An
assumption reserves capacity for `assumeSeconds`, so it is made only on a node the cache knows and where every
GPU resource the pod asks for is free, counting the other pods' assumptions (`assumable`): a request naming a
node the pod does not fit would otherwise reserve what is not there and crowd real pods out.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import Any

from gpupack.core.objects import priority_of
from gpupack.core.policy import Policy
from gpupack.extender.demand import PodDemand
from gpupack.extender.filter import Rejection, reject
from gpupack.extender.inventory import CPU, MEMORY, NodeRecord, node_from_json
from gpupack.extender.live import LiveMetrics
from gpupack.extender.preemption import Candidate, PreemptOutcome, preempt, without
from gpupack.extender.score import priorities, scores
from gpupack.extender.snapshot import NodeSnapshot
from gpupack.extender.state import ClusterState
from gpupack.extender.typical import NodeLayout, ShapeBook, gpu_layout
from gpupack.extender.wire import ArgsError, ExtenderArgs, PreemptionArgs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A node's answer for a pod: why it is filtered out (None: it is not) and its score."""

    rejection: Rejection | None
    score: int


class _Table:
    """The verdicts of one pod shape, and up to which state change, epoch and live snapshot they are current.

    A verdict is kept as its score and, for a node filtered out, its rejection, in two dicts rather than one of
    `Verdict` objects: a cached answer then reads one int per candidate, and the filter tests the candidates
    against the (few) rejected names, instead of visiting 500 objects scattered in memory.
    """

    __slots__ = ("epoch", "expiry", "own", "position", "rejected", "scores", "serial", "until")

    def __init__(self) -> None:
        self.scores: dict[str, int] = {}
        """Per node decided, its score."""
        self.rejected: dict[str, Rejection] = {}
        """Per node decided and filtered out, why."""
        self.own: dict[str, tuple[str, Verdict]] = {}
        """Per node, the verdict for the one pod assumed there that is asked about again, without its own
        assumption (`scores` and `rejected` count it, as every other pod of the shape must)."""
        self.position = -1
        self.epoch = -1
        self.serial = -1
        self.expiry: dict[str, float] = {}
        """Per node whose verdict expires by itself: when (the earlier of assumption expiry and data ageing)."""
        self.until = float("inf")
        """The earliest of `expiry`."""

    def store(self, name: str, verdict: Verdict) -> None:
        """Keep the shape's verdict on node `name`."""
        self.scores[name] = verdict.score
        if verdict.rejection is None:
            self.rejected.pop(name, None)
        else:
            self.rejected[name] = verdict.rejection

    def clear(self) -> None:
        """Forget every verdict."""
        self.scores.clear()
        self.rejected.clear()
        self.own.clear()
        self.expiry.clear()
        self.until = float("inf")

    def drop(self, name: str) -> None:
        """Forget what was decided on node `name`, and when it would have expired (the next verdict brings its
        own)."""
        self.scores.pop(name, None)
        self.rejected.pop(name, None)
        self.own.pop(name, None)
        self.expiry.pop(name, None)

    def own_verdict(self, name: str, pod: str) -> Verdict | None:
        """The verdict kept for `pod` on the node it is assumed on, if any."""
        kept = self.own.get(name)
        return kept[1] if kept is not None and kept[0] == pod else None


NAME_COPIES = 100_000
"""Node names `DecisionCache.name` keeps before starting over."""


class DecisionCache:
    """Verdicts per pod shape and node, reused while nothing they read has changed.

    kube-scheduler asks about the same few pod shapes (one Deployment's replicas) on hundreds of nodes, and
    between two calls only the nodes touched by a pod event or an assumption change. Before a table is read it
    catches up with the state's change log, dropping the verdicts of the nodes changed since; a full list or a
    new live snapshot clears it, and verdicts that expire by themselves (an assumption ending, a GPU sample
    ageing out) are dropped when their time comes. The answers are identical to computing afresh (tested); only
    the recomputation is skipped.
    """

    def __init__(self, shapes: int = 32) -> None:
        self._tables: OrderedDict[tuple[object, ...], _Table] = OrderedDict()
        self._shapes = shapes
        self._names: dict[str, str] = {}

    def name(self, name: str) -> str:
        """The cache's own copy of a node name, to key its tables with.

        A cached answer is one dict lookup per candidate, and each lookup compares the request's name with the
        key's characters. The node records' names were allocated while the first list was read, scattered among
        150,000 pods' objects; copies made as the nodes are first decided sit together in memory. On the
        benchmark the lookups were a third of the filter's time, and the copies gave about 5 % more throughput.
        """
        kept = self._names.get(name)
        if kept is None:
            if len(self._names) >= NAME_COPIES:  # names come and go with nodes: start over now and then
                self._names.clear()
            kept = self._names[name] = name.encode().decode()
        return kept

    def table(self, key: tuple[object, ...], state: ClusterState, serial: int, clock: float) -> _Table:
        """The current verdicts of one (policy version, pod shape); least recently used shapes are evicted."""
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table()
            if len(self._tables) > self._shapes:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        changed = state.changed_since(table.position)
        if table.epoch != state.epoch or table.serial != serial or changed is None:
            table.clear()
            table.epoch, table.serial = state.epoch, serial
        else:
            for name in changed:
                table.drop(name)
        table.position = state.change_count
        if clock >= table.until:
            for name in [n for n, t in table.expiry.items() if clock >= t]:
                table.drop(name)
            table.until = min(table.expiry.values(), default=float("inf"))
        return table

    def expires(self, key: tuple[object, ...], name: str, when: float) -> None:
        """Record that the verdict just stored for `name` expires at `when` (a time on `clock`'s scale)."""
        table = self._tables[key]
        table.expiry[name] = min(when, table.expiry.get(name, when))
        table.until = min(table.until, when)


@dataclass(frozen=True, slots=True)
class View:
    """What the verbs read: the cluster state, the live metrics, the policy in force and the decision cache."""

    state: ClusterState
    live: LiveMetrics
    policy: Policy
    policy_version: str = ""
    cache: DecisionCache | None = None
    book: ShapeBook = field(default_factory=ShapeBook)
    """The typical pod shapes `gpupack` scores fragmentation against."""


@dataclass(slots=True)
class FilterOutcome:
    """Nodes kept, and the reason for each node removed (resolvable by preemption or not)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)
    """The kind of each rejection (for the filter-reason counter)."""


def snapshot(record: NodeRecord, view: View, now: float, wall: float, pod: str | None = None) -> NodeSnapshot:
    """One node with its usage (bound + assumed, but for `pod`'s own assumption) and fresh GPU utilizations, and
    under `gpupack` scoring the free share of each GPU and the pod count."""
    max_age = view.policy.extender.metrics.max_age_seconds
    name, state = record.name, view.state
    utils = view.live.fresh_utils(name, wall, max_age)
    assumed = state.assumed_on(name, now, pod)  # drops expired ones first
    used = state.used(name, now, assumed)
    if view.policy.extender.scoring != "gpupack":
        return NodeSnapshot(record, used, utils)
    layout = state.derived.get(name)  # the bound pods' layout: assumptions come and go far more often
    if not isinstance(layout, NodeLayout) or layout.record is not record:
        requests, workloads = state.bound_on(name)
        layout = NodeLayout(record, tuple(gpu_layout(record, requests)), workloads)
        if state.nodes.get(name) is record:  # a node the request brings (full Nodes) is not kept
            state.derived[name] = layout
    if not assumed:
        return NodeSnapshot(record, used, utils, layout.gpu_free, layout.pods)
    gpu_free = tuple(gpu_layout(record, [a.requests for a in assumed], layout.gpu_free))
    return NodeSnapshot(record, used, utils, gpu_free, layout.pods + len(assumed))


def judge(demand: PodDemand, snaps: list[NodeSnapshot], policy: Policy, book: ShapeBook) -> list[Verdict]:
    """Filter and score nodes (scored together: `gpupack` vectorizes over them). A claim pod is judged on each node
    as asking for the device it would take there (`PodDemand.on`), nodes asking alike scored together."""
    if demand.alternatives:
        groups: dict[str | None, tuple[PodDemand, list[int]]] = {}
        for i, snap in enumerate(snaps):
            there = demand.on(snap.node.allocatable, snap.used)
            groups.setdefault(there.gpu_resource, (there, []))[1].append(i)
        out: list[Verdict] = list(repeat(Verdict(None, 0), len(snaps)))
        for there, at in groups.values():
            for i, decided in zip(at, judge(there, [snaps[i] for i in at], policy, book), strict=True):
                out[i] = decided
        return out
    found = scores(demand, snaps, policy, book)
    return [Verdict(reject(demand, snap, policy), value) for snap, value in zip(snaps, found, strict=True)]


def verdict(demand: PodDemand, snap: NodeSnapshot, policy: Policy, book: ShapeBook) -> Verdict:
    """Filter and score one node."""
    return judge(demand, [snap], policy, book)[0]


@dataclass(frozen=True, slots=True)
class Decisions:
    """The verdicts on a request's candidates: the score of each (None: a node the cache does not know), and why
    nodes are filtered out, by name (it may name nodes outside the request: it can be the cache's whole table)."""

    names: list[str]
    scores: list[int | None]
    rejections: Mapping[str, Rejection]


def _decisions(names: list[str], found: Sequence[Verdict | None]) -> Decisions:
    return Decisions(
        names,
        [None if v is None else v.score for v in found],
        {name: v.rejection for name, v in zip(names, found, strict=True) if v is not None and v.rejection},
    )


def decide(demand: PodDemand, args: ExtenderArgs, view: View) -> Decisions:
    """The verdicts on the candidates of `args`, from the decision cache where it has them.

    The pod's own assumption (kube-scheduler asking again about a pod it has not bound yet) is left out of every
    decision. Raises ArgsError for unreadable full Nodes (those are decided afresh: they are the scheduler's view).
    """
    now, wall = time.monotonic(), time.time()
    policy, pod = view.policy, demand.key
    names = args.names
    if args.nodes is not None:
        records = []
        for node in args.nodes:
            try:
                records.append(node_from_json(node, policy))
            except ValueError as exc:
                raise ArgsError(f"ExtenderArgs.Nodes: {exc}") from exc
        return _decisions(names, judge(demand, [snapshot(r, view, now, wall, pod) for r in records], policy, view.book))
    state, live, cache = view.state, view.live, view.cache
    nodes = state.nodes
    max_age = policy.extender.metrics.max_age_seconds
    if cache is None:
        out: list[Verdict | None] = [None] * len(names)
        known = [(i, r) for i, name in enumerate(names) if (r := nodes.get(name)) is not None]
        fresh = judge(demand, [snapshot(r, view, now, wall, pod) for _, r in known], policy, view.book)
        for (i, _), found in zip(known, fresh, strict=True):
            out[i] = found
        return _decisions(names, out)
    key = (view.policy_version, view.book.version, demand.shape)
    table = cache.table(key, state, live.serial, now)
    cached = list(map(table.scores.get, names))  # the usual case: every score cached, no Python-level loop
    own = state.assumed_node(pod)
    mine: list[int] = []  # where the pod's own node is among the candidates
    if own is not None:  # the shape's verdict there counts the pod: use (or decide) one without it
        at = -1
        try:
            while True:  # every copy of the name (kube-scheduler sends a set; a hand-made request may not)
                at = names.index(own, at + 1)
                mine.append(at)
        except ValueError:  # no (further) copy among the candidates
            pass
        kept = table.own_verdict(own, pod)
        for at in mine:
            cached[at] = None if kept is None else kept.score
    if any(map(is_, cached, repeat(None))):  # still no Python-level loop (`None in out` would call __eq__)
        # Each node is decided once, however often it is named (kube-scheduler sends a set; a hand-made request
        # may repeat one name up to MAX_CANDIDATES times).
        positions: dict[str, list[int]] = {}
        for i, score in enumerate(cached):
            if score is None:
                positions.setdefault(names[i], []).append(i)
        missing = [r for name in positions if (r := nodes.get(name)) is not None]
        fresh = judge(demand, [snapshot(r, view, now, wall, pod) for r in missing], policy, view.book)
        for record, found in zip(missing, fresh, strict=True):
            name = cache.name(record.name)
            for i in positions[record.name]:
                cached[i] = found.score
            if name == own:
                table.own[name] = (pod, found)
            else:  # the pod is not assumed here: the verdict holds for every pod of its shape
                table.store(name, found)
            # One clock for expiry: the monotonic one (assumptions), with data age converted from wall time.
            until = min(state.valid_until(name), now + (live.fresh_until(name, wall, max_age) - wall))
            if until != float("inf"):
                cache.expires(key, name, until)
    rejections: Mapping[str, Rejection] = table.rejected
    if mine and own is not None:
        kept = table.own_verdict(own, pod)
        if kept is not None and kept.rejection is not table.rejected.get(own):
            overridden = dict(table.rejected)  # a retried pod's own node (rare: copying is fine)
            if kept.rejection is None:
                del overridden[own]
            else:
                overridden[own] = kept.rejection
            rejections = overridden
    return Decisions(names, cached, rejections)


def filter_nodes(demand: PodDemand, args: ExtenderArgs, view: View) -> FilterOutcome:
    """Apply `extender.filter.reject` to each candidate. Raises ArgsError for unreadable full Nodes.

    A node refused only for want of the pod's GPU resource is judged again without the victims the preempt verb
    agreed to for this pod there (`ClusterState.preempting`): kube-scheduler sends it only once its own cache
    has them gone, and the watch may not have shown it yet."""
    decided = decide(demand, args, view)
    names, rejections = decided.names, decided.rejections
    if not rejections or rejections.keys().isdisjoint(names):  # the usual case: no Python-level loop
        return _assumed_if_alone(demand, FilterOutcome(list(names)), view)
    outcome = FilterOutcome()
    for name in names:
        rejection = rejections.get(name)
        if rejection is not None and rejection.kind == "insufficient":
            rejection = _without_leaving(demand, name, rejection, view)
        if rejection is None:
            outcome.passed.append(name)
            continue
        outcome.kinds.append(rejection.kind)
        if rejection.unresolvable:
            outcome.unresolvable[name] = rejection.reason
        else:
            outcome.failed[name] = rejection.reason
    return _assumed_if_alone(demand, outcome, view)


def _without_leaving(demand: PodDemand, name: str, rejection: Rejection, view: View) -> Rejection | None:
    """`rejection` of node `name`, or the verdict there once the victims leaving for this pod are gone."""
    now = time.monotonic()
    leaving = view.state.leaving(demand.key, name, now)
    record = view.state.nodes.get(name)
    if not leaving or record is None:
        return rejection
    snap = without(snapshot(record, view, now, time.time(), demand.key), leaving)
    return reject(demand.on(record.allocatable, snap.used), snap, view.policy)


def _assumed_if_alone(demand: PodDemand, outcome: FilterOutcome, view: View) -> FilterOutcome:
    if len(outcome.passed) == 1 and demand.asks_gpu:
        now = time.monotonic()
        if assumable(demand, outcome.passed[0], view, now):  # it passed, but may be a node the cache does not know
            _assume(demand, outcome.passed[0], view, now)
    return outcome


def assumable(demand: PodDemand, name: str, view: View, now: float) -> bool:
    """Whether `demand`'s pod may be assumed on node `name`: the cache knows the node, and each GPU resource the
    pod asks for has that many units free there, counting bound pods and every assumption but the pod's own (a
    retried pod is never crowded out of its own node). Only GPU resources: the extender filters on no other.

    Every resource is checked, not only the one the filter reads (`PodDemand.gpu_resource`), so that no
    assumption ever takes a node's usage of any GPU resource above its allocatable."""
    record = view.state.nodes.get(name)
    if record is None:
        return False
    state, allocatable = view.state, record.allocatable
    used = state.used(name, now, state.assumed_on(name, now, demand.key))
    demand = demand.on(allocatable, used)
    return all(
        n <= allocatable.get(r, 0) - used.get(r, 0) or n == 0
        for r, n in demand.requests.items()
        if r != CPU and r != MEMORY
    )


def prioritize_nodes(demand: PodDemand, args: ExtenderArgs, view: View) -> list[int]:
    """Score each candidate 0..10, in the order of `args.names`, and assume the pod on the best one where it fits
    (see `assume_target`)."""
    decided = decide(demand, args, view)
    values = priorities(decided.scores, view.policy)
    if values and demand.asks_gpu:
        now = time.monotonic()
        target = assume_target(demand, decided, values, view, now)
        if target is not None:
            _assume(demand, target, view, now)
            return sole_best(values, decided.names.index(target))
    return values


def sole_best(values: list[int], target: int) -> list[int]:
    """`values` with the assumed node `target` alone at the top: other nodes scored as high drop one point.

    Among nodes the extender ranks equal, kube-scheduler picks at random (its own scores are often equal too: two
    empty nodes). The assume cache then counts the pod on one node while it is bound to another, and until the
    watch shows the binding the next pods are ranked by the wrong node's usage: on a real kube-scheduler a burst of
    one-GPU pods on DRA nodes, whose binding waits for a claim to be written, spread over two empty nodes instead
    of filling one. One point is the extender's weight times ten in kube-scheduler's sum, more than the other
    plugins' differences between two nodes that look alike."""
    best = values[target]
    if values.count(best) == 1:
        return values
    return [v - 1 if v == best and i != target else v for i, v in enumerate(values)]


def assume_target(demand: PodDemand, decided: Decisions, values: list[int], view: View, now: float) -> str | None:
    """The node to assume the pod on after prioritize: the best-ranked candidate that is not filtered out for it
    and where it is `assumable` (the first of equals, or the node it is already assumed on when that is one of
    them: a retry keeps its node and voids no decision); None when there is no such candidate.

    kube-scheduler sends only nodes that passed the filter, so the first node tried is the usual answer; the
    others are tried, best first, only for a request naming nodes the pod was filtered out of, or that filled up
    since (a try costs a dict lookup, plus reading the node's assumptions when the pod is not filtered out)."""
    names, rejections = decided.names, decided.rejections

    def fits(name: str) -> bool:
        return rejections.get(name) is None and assumable(demand, name, view, now)

    best = max(values)
    first = names[values.index(best)]
    already = view.state.assumed_node(demand.key)
    if already is not None and already != first and already in names and values[names.index(already)] == best:
        if fits(already):
            return already
    if fits(first):
        return first
    for i in sorted(range(len(names)), key=values.__getitem__, reverse=True):  # stable: the first of equals first
        if fits(names[i]):
            return names[i]
    return None


def _assume(demand: PodDemand, node: str, view: View, now: float) -> None:
    """Assume the pod on `node` (one the cache knows: `assumable` said so), a claim pod with the device it takes
    there."""
    if demand.alternatives:
        state = view.state
        used = state.used(node, now, state.assumed_on(node, now, demand.key))
        demand = demand.on(state.nodes[node].allocatable, used)
    view.state.assume(demand.key, node, demand.requests, view.policy.extender.assume_seconds, now)
    log.debug("assumed pod=%s node=%s", demand.key, node)


def preempt_nodes(demand: PodDemand, args: PreemptionArgs, view: View) -> PreemptOutcome:
    """The preempt verb over kube-scheduler's candidates (`extender.preemption.preempt`), on the watch cache's
    nodes as they are now, this pod's own assumption left out. The victims kept are remembered for the pod's
    next filter (`filter_nodes`)."""
    now, wall = time.monotonic(), time.time()
    snapshots = {}
    for name in args.victims:
        record = view.state.nodes.get(name)
        if record is not None:
            snapshots[name] = snapshot(record, view, now, wall, demand.key)
    candidates = {name: Candidate(uids, violations) for name, (uids, violations) in args.victims.items()}
    measured = view.live.newest() is not None
    victims = {uid: p for uids, _ in args.victims.values() for uid in uids if (p := view.state.holding(uid))}
    outcome = preempt(demand, priority_of(args.pod), candidates, snapshots, victims, view.policy, measured, now=wall)
    view.state.preempting(demand.key, {name: kept.victims for name, kept in outcome.kept.items()}, now=now)
    return outcome


def describe_state(view: View, now: float | None = None) -> dict[str, Any]:
    """What the extender believes about each node, for `GET /state`.

    `free` is allocatable minus what bound pods and live assumptions request, never below 0; `requested` is that
    request per GPU resource, including resources the node no longer offers. Assumptions never take a node past
    its allocatable (`assumable`), but bound pods can: a device plugin that lowered allocatable under running
    pods shows as `requested` above `allocatable` with `free` 0, rather than as a negative count."""
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
            "free": {r: max(record.allocatable[r] - used.get(r, 0), 0) for r in record.gpu_resources},
            "allocatable": {r: record.allocatable[r] for r in record.gpu_resources},
            "requested": {r: n for r, n in used.items() if n and r != CPU and r != MEMORY},
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
