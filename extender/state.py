"""The cluster as the extender believes it: nodes, what bound pods use on each, and assumed placements.

Between the moment the extender ranks a node first and the moment the watch shows the pod bound there, the
scheduler keeps placing pods; without counting those a burst of pods would all pick the same "best" node.
Like kube-scheduler's assume cache, a pod ranked first is counted on its node until it shows up bound
(anywhere), is deleted, or its assumption expires.

Usage per node is kept as running sums updated on each pod event, so a verb never walks the pods.

On nodes whose GPUs a DRA driver publishes, the node's record carries them as extended resources
(`inventory.with_gpus`): the state keeps each Node's own record and the node's ResourceSlices apart and merges them
whenever either changes. A ResourceClaim that kube-scheduler did not make for an extended-resource request (those
devices are the pod's request already) counts on its node as a pod of its own, keyed `resourceclaim:<ns>/<name>`.

The victims the preempt verb agreed to are remembered per preemptor (`ClusterState.preempting`), so that the pod's
next filter does not refuse the node they die for while the watch has not yet shown them gone.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpupack.core.dra import ClaimDevices, DriverSlice, GpuDevice, NodeGpus, held_resources, node_gpus, nodes_by_uuid
from gpupack.extender.inventory import NodeRecord, with_gpus

Requests = tuple[tuple[str, int], ...]
_NOTHING: Mapping[str, int] = {}
_NO_PODS: Mapping[str, PodRecord] = {}
CHANGE_LOG = 100_000
CLAIM_KEY = "resourceclaim:"
"""The prefix of the key a ResourceClaim's devices are counted under (no pod uid or namespace/name has it)."""


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A bound pod: where, and what it requests (only the resources the extender counts)."""

    node: str
    requests: Requests
    workload: bool = True
    """False for a DaemonSet's pod (it counts in usage, not as a pod that puts the node in use)."""
    rank: int = 3
    """What losing it costs, as a preemption victim (`extender.preemption.victim_rank`; 3: of unknown worth)."""
    priority: int = 0
    """Its `spec.priority`: the preempt verb ranks victims by it before their class (`extender.preemption`)."""
    started: float | None = None
    """When it started running (`status.startTime`, seconds since the epoch; None: not yet): the work a
    preemption takes from it grows with the time it ran."""


@dataclass(frozen=True, slots=True)
class Preempting:
    """The victims the preempt verb agreed to for one preemptor, per candidate node, and until when that holds."""

    victims: Mapping[str, tuple[str, ...]]
    expires: float


PREEMPTING_SECONDS = 600.0
"""How long the victims agreed for a preemptor count as leaving for it: longer than any sensible termination grace
period (kube-scheduler waits for the victims before it retries the pod), so the record outlives the race it is
for, and bounded so a preemptor that never comes back is forgotten."""
PREEMPTING_MAX = 4096
"""Preemptors remembered at most (the oldest is forgotten first): a preemption storm cannot grow memory."""


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod the extender ranked first for `node`, not yet seen bound."""

    node: str
    requests: Requests
    expires: float


def _add(usage: dict[str, int], requests: Requests, sign: int) -> None:
    for resource, n in requests:
        usage[resource] = usage.get(resource, 0) + sign * n


class ClusterState:
    """Nodes, per-node usage by bound pods, and the assume cache. Single-threaded: mutate from the event loop."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self._usage: dict[str, dict[str, int]] = {}
        self._assumed: dict[str, Assumed] = {}
        self._assumed_by_node: dict[str, set[str]] = {}
        self._preempting: OrderedDict[str, Preempting] = OrderedDict()
        self.synced = False
        """True once a first full list of nodes and pods has been applied."""
        self.epoch = 0
        """Bumped when everything is replaced (a full list): every cached decision is void."""
        self._changed: list[str] = []
        """Nodes whose inputs to a decision changed (record, usage, assumptions), in order; see `changed_since`."""
        self._changed_base = 0
        self._by_node: dict[str, dict[str, PodRecord]] = {}
        """Bound pods per node, in the order they were first seen there (the order their GPUs were handed out)."""
        self.pod_changes = 0
        """How many pod events were applied (the typical shapes re-count after enough of them)."""
        self.pod_lists = 0
        """How many full pod lists replaced the pods (the typical shapes re-count after each)."""
        self.derived: dict[str, object] = {}
        """Per node, a value computed from its record and bound pods (the GPU layout), dropped when either changes."""
        self._own: dict[str, NodeRecord] = {}
        """Each node's record as its Node object says (`nodes` holds it merged with its DRA devices)."""
        self._slices: dict[str, DriverSlice] = {}
        """NVIDIA's driver's ResourceSlices by name."""
        self._gpus: dict[str, NodeGpus] = {}
        """Per node, the GPUs its slices publish."""
        self.gpu_nodes: Mapping[str, str] = {}
        """The node of each GPU UUID a DRA driver publishes (`dra.nodes_by_uuid`): the live metrics map DCGM
        series by it. Replaced, never changed in place, so the metrics thread reads it without a lock."""
        self._claims: dict[str, ClaimDevices] = {}
        """ResourceClaims holding the driver's devices, by namespace/name."""
        self._held: dict[str, dict[str, int]] = {}
        """Per node, the devices claims hold there (by name, with how many claims hold each)."""

    def _touch(self, node: str, bound: bool = True) -> None:
        """Log a change of `node`'s inputs; `bound`: its record or bound pods changed (not only an assumption)."""
        if bound:
            self.derived.pop(node, None)
        self._changed.append(node)
        if len(self._changed) > CHANGE_LOG:  # readers that far behind start over
            self._changed_base += len(self._changed)
            self._changed = []
            self.epoch += 1

    @property
    def change_count(self) -> int:
        """How many node changes happened so far (a position in the change log)."""
        return self._changed_base + len(self._changed)

    def changed_since(self, position: int) -> list[str] | None:
        """Nodes changed after `position` (with repeats); None when that position is no longer in the log."""
        start = position - self._changed_base
        if start < 0:
            return None
        return self._changed[start:]

    # nodes -------------------------------------------------------------------------------------------------
    def upsert_node(self, node: NodeRecord) -> None:
        """Add or replace a node."""
        self._own[node.name] = node
        self._merge(node.name)
        self._touch(node.name)

    def remove_node(self, name: str) -> None:
        """Forget a node (its pods are removed by their own events)."""
        self._own.pop(name, None)
        self.nodes.pop(name, None)
        self._touch(name)

    def replace_nodes(self, nodes: Iterable[NodeRecord]) -> None:
        """Replace every node (after a full list)."""
        self._own = {n.name: n for n in nodes}
        self.nodes = {}
        for name in self._own:
            self._merge(name)
        self.derived = {}
        self.epoch += 1

    # DRA devices -------------------------------------------------------------------------------------------
    def _merge(self, node: str) -> None:
        """The node's record: its Node's, with the GPUs its slices publish (and, on partitionable GPUs, what the
        claims hold there: it decides what is left to carve)."""
        own = self._own.get(node)
        if own is None:
            return
        gpus = self._gpus.get(node)
        held = tuple(self._held.get(node, ())) if gpus is not None and gpus.partitionable else ()
        self.nodes[node] = with_gpus(own, gpus, held)

    def _regroup(self, node: str) -> None:
        """Re-read `node`'s GPUs from its slices, merge them into its record, and recount the claims on it."""
        gpus = node_gpus(node, (s for s in self._slices.values() if s.node == node))
        if gpus.devices:
            self._gpus[node] = gpus
        else:
            self._gpus.pop(node, None)
        # only this node's UUIDs change: a copy of the map with them replaced (a driver rollout republishes every
        # slice, and walking every node's devices on each event took 7 ms with 500 nodes of 152 devices)
        uuids = {u: n for u, n in self.gpu_nodes.items() if n != node}
        uuids.update(nodes_by_uuid({node: gpus}))
        self.gpu_nodes = uuids
        self._merge(node)
        self._touch(node)
        for claim in [c for c in self._claims.values() if any(pool == node for pool, _ in c.devices)]:
            self._count_claim(claim)

    def upsert_slice(self, published: DriverSlice) -> None:
        """Add or replace a ResourceSlice of NVIDIA's driver."""
        old = self._slices.get(published.name)
        self._slices[published.name] = published
        if old is not None and old.node != published.node:
            self._regroup(old.node)
        self._regroup(published.node)

    def remove_slice(self, name: str) -> None:
        """Forget a ResourceSlice."""
        old = self._slices.pop(name, None)
        if old is not None:
            self._regroup(old.node)

    def replace_slices(self, slices: Iterable[DriverSlice]) -> None:
        """Replace every slice (after a full list)."""
        self._slices = {s.name: s for s in slices}
        by_node: dict[str, list[DriverSlice]] = {}
        for one in self._slices.values():
            by_node.setdefault(one.node, []).append(one)
        self._gpus = {n: g for n, found in by_node.items() if (g := node_gpus(n, found)).devices}
        self.gpu_nodes = nodes_by_uuid(self._gpus)
        for name in self._own:
            self._merge(name)
        self.derived = {}
        self.epoch += 1
        for claim in list(self._claims.values()):
            self._count_claim(claim)

    def _device(self, pool: str, name: str) -> GpuDevice | None:
        gpus = self._gpus.get(pool)
        return None if gpus is None else next((d for d in gpus.devices if d.name == name), None)

    def _count_claim(self, claim: ClaimDevices) -> list[tuple[str, str]]:
        """Count a claim's devices as a pod on their node (not a claim kube-scheduler made for an extended-resource
        request: the pod's request counts those); returns the devices no slice publishes."""
        devices = {(pool, name): d for pool, name in claim.devices if (d := self._device(pool, name)) is not None}
        if not claim.extended:
            held = held_resources(claim, devices)
            node, requests = next(iter(held.items()), (None, {}))
            self.upsert_pod(CLAIM_KEY + claim.key, node, tuple(sorted(requests.items())))
            for pod in claim.pods:  # kube-scheduler allocates before it binds: the claim now counts what was assumed
                self._forget_assumed(pod)
        return [d for d in claim.devices if d not in devices]

    def holding(self, key: str) -> PodRecord | None:
        """The bound pod `key` with, in its requests, the devices of the claims reserved for it that count apart
        (`CLAIM_KEY`; not the claims kube-scheduler made for its extended-resource requests, which its requests
        say): what the node gets back if the pod goes, as the preempt verb weighs a victim."""
        record = self.pods.get(key)
        if record is None or not self._claims:
            return record
        extra: dict[str, int] = {}
        for claim in self._claims.values():
            if claim.extended or key not in claim.pods:
                continue
            counted = self.pods.get(CLAIM_KEY + claim.key)  # what `_count_claim` counts of it, and where
            if counted is not None and counted.node == record.node:
                for resource, count in counted.requests:
                    extra[resource] = extra.get(resource, 0) + count
        if not extra:
            return record
        for resource, count in record.requests:
            extra[resource] = extra.get(resource, 0) + count
        return replace(record, requests=tuple(sorted(extra.items())))

    def _hold(self, claim: ClaimDevices, sign: int) -> None:
        """Add (`sign` 1) or remove (-1) a claim's devices from what is held on each node; re-merge the nodes
        whose partitionable GPUs that changes."""
        nodes: set[str] = set()
        for pool, name in claim.devices:
            on = self._held.setdefault(pool, {})
            on[name] = on.get(name, 0) + sign
            if on[name] <= 0:
                del on[name]
            if not on:
                del self._held[pool]
            nodes.add(pool)
        for node in nodes:
            gpus = self._gpus.get(node)
            if gpus is not None and gpus.partitionable:
                self._merge(node)
                self._touch(node)

    def upsert_claim(self, claim: ClaimDevices) -> list[tuple[str, str]]:
        """Add or replace a ResourceClaim. Returns the (pool, device) it holds that no slice publishes (not
        counted; the caller logs them)."""
        self.remove_claim(claim.key)
        if not claim.devices:
            return []
        self._claims[claim.key] = claim
        self._hold(claim, +1)
        return self._count_claim(claim)

    def remove_claim(self, key: str) -> None:
        """Forget a ResourceClaim (deleted, or no longer holding devices)."""
        old = self._claims.pop(key, None)
        if old is not None:
            self._hold(old, -1)
            if not old.extended:
                self.upsert_pod(CLAIM_KEY + key, None, ())

    def replace_claims(self, claims: Iterable[ClaimDevices]) -> list[tuple[str, str]]:
        """Replace every claim (after a full list); returns the devices no slice publishes."""
        for key in list(self._claims):
            self.remove_claim(key)
        unknown: list[tuple[str, str]] = []
        for claim in claims:
            unknown += self.upsert_claim(claim)
        return unknown

    # pods --------------------------------------------------------------------------------------------------
    def upsert_pod(
        self,
        key: str,
        node: str | None,
        requests: Requests,
        workload: bool = True,
        rank: int = 3,
        priority: int = 0,
        started: float | None = None,
    ) -> None:
        """Record a pod event: counted on `node` when bound and running; None (pending or finished) uncounts it."""
        self.pod_changes += 1
        old = self.pods.pop(key, None)
        if old is not None:
            _add(self._usage.setdefault(old.node, {}), old.requests, -1)
            self._touch(old.node)
            if old.node != node:
                on_node = self._by_node.get(old.node, {})
                on_node.pop(key, None)
                if not on_node:
                    self._by_node.pop(old.node, None)
        if node:
            self._forget_assumed(key)
            self._preempting.pop(key, None)
            self.pods[key] = record = PodRecord(node, requests, workload, rank, priority, started)
            _add(self._usage.setdefault(node, {}), requests, +1)
            self._by_node.setdefault(node, {})[key] = record  # an update keeps its place
            self._touch(node)

    def remove_pod(self, key: str) -> None:
        """A deleted pod frees what it used and its assumption."""
        self.upsert_pod(key, None, ())
        self._forget_assumed(key)
        self._preempting.pop(key, None)

    def replace_pods(self, pods: Iterable[tuple[str, PodRecord]]) -> None:
        """Replace every pod (after a full list): (key, record) of the bound, running ones."""
        self.pods = {}
        self._usage = {}
        self._by_node = {}
        for key, record in pods:
            node, requests = record.node, record.requests
            self.pods[key] = record
            _add(self._usage.setdefault(node, {}), requests, +1)
            self._by_node.setdefault(node, {})[key] = record
        self.pod_changes += len(self.pods) + 1
        self.pod_lists += 1
        self.derived = {}
        for key in [k for k in self._assumed if k in self.pods]:
            self._forget_assumed(key)
        for claim in list(self._claims.values()):  # the claims' devices are not pods: they stay counted
            self._count_claim(claim)
        self.epoch += 1

    # the assume cache --------------------------------------------------------------------------------------
    def assume(self, key: str, node: str, requests: Mapping[str, int], ttl: float, now: float | None = None) -> None:
        """Count `key` on `node` for `ttl` seconds, unless it is already seen bound."""
        if key in self.pods:
            return
        counted = tuple(requests.items())
        expires = (now or time.monotonic()) + ttl
        same = self._assumed.get(key)
        if same is not None and same.node == node and same.requests == counted and same.expires > (now or 0.0):
            # kube-scheduler asking again about the same pod: only the expiry moves, so no decision is void (cached
            # verdicts keep the earlier expiry and are merely re-decided sooner than needed)
            self._assumed[key] = Assumed(node, counted, expires)
            return
        self._forget_assumed(key)
        self._assumed[key] = Assumed(node, counted, expires)
        self._assumed_by_node.setdefault(node, set()).add(key)
        self._touch(node, bound=False)

    def _forget_assumed(self, key: str) -> None:
        assumed = self._assumed.pop(key, None)
        if assumed is not None:
            self._touch(assumed.node, bound=False)
            keys = self._assumed_by_node.get(assumed.node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._assumed_by_node[assumed.node]

    def assumed_on(self, node: str, now: float | None = None, excluding: str | None = None) -> list[Assumed]:
        """Live assumptions on `node`, but for pod `excluding`; expired ones are dropped on the way.

        A pod asked about again (kube-scheduler retrying it) must not see its own assumption: it would compete
        with itself for the node it was ranked first on, and be filtered out of a node it alone fills.
        """
        keys = self._assumed_by_node.get(node)
        if not keys:
            return []
        now = now or time.monotonic()
        live: list[Assumed] = []
        for key in list(keys):
            assumed = self._assumed[key]
            if assumed.expires <= now:
                self._forget_assumed(key)
            elif key != excluding:
                live.append(assumed)
        return live

    def assumed_node(self, key: str) -> str | None:
        """The node `key` is assumed on (None when it is not, or no longer, assumed)."""
        assumed = self._assumed.get(key)
        return None if assumed is None else assumed.node

    def assumed_count(self) -> int:
        """Assumptions held (expired ones included until their node is next read)."""
        return len(self._assumed)

    # victims on their way out ------------------------------------------------------------------------------
    def preempting(
        self, key: str, victims: Mapping[str, Sequence[str]], ttl: float = PREEMPTING_SECONDS, now: float | None = None
    ) -> None:
        """Remember that the preempt verb agreed to `victims` (node -> victim keys) for preemptor `key`.

        kube-scheduler deletes the victims on the node it picks and retries the pod as soon as its own cache sees
        them gone. The extender's watch may deliver those deletions a moment later (seen on a real control plane
        under load: 460 ms), and a filter that still counts the victims refuses the very node they died for, as
        resolvable, so kube-scheduler preempts again elsewhere. `leaving` lets the filter count them gone for
        this pod only (`verbs.filter_nodes`). Nothing else reads the record, so it cannot make room for another
        pod; it is dropped when the pod is seen bound or deleted, after `ttl`, or when `PREEMPTING_MAX` newer
        ones push it out.
        """
        if not victims:
            return
        self._preempting.pop(key, None)
        self._preempting[key] = Preempting(
            {node: tuple(keys) for node, keys in victims.items()}, (now or time.monotonic()) + ttl
        )
        while len(self._preempting) > PREEMPTING_MAX:
            self._preempting.popitem(last=False)

    def leaving(self, key: str, node: str, now: float | None = None) -> list[PodRecord]:
        """The victims agreed for preemptor `key` on `node` that the cache still holds there (empty once they are
        gone, or when there is no live record)."""
        record = self._preempting.get(key)
        if record is None:
            return []
        if record.expires <= (now or time.monotonic()):
            del self._preempting[key]
            return []
        return [p for v in record.victims.get(node, ()) if (p := self.holding(v)) is not None and p.node == node]

    def preempting_count(self) -> int:
        """Preemptors remembered (expired ones included until read)."""
        return len(self._preempting)

    # reading -----------------------------------------------------------------------------------------------
    def used(self, node: str, now: float | None = None, assumed: list[Assumed] | None = None) -> Mapping[str, int]:
        """What bound pods and live assumptions use on `node` (read-only: it may be the running sums). `assumed`:
        the node's `assumed_on` when the caller already has it."""
        usage = self._usage.get(node, _NOTHING)
        if assumed is None:
            assumed = self.assumed_on(node, now)
        if not assumed:
            return usage
        total = dict(usage)
        for one in assumed:
            _add(total, one.requests, +1)
        return total

    def bound_on(self, node: str) -> tuple[list[Requests], int]:
        """The requests of the pods bound to `node`, in the order first seen, and how many of them are workloads
        (not DaemonSet pods)."""
        bound = self._by_node.get(node, _NO_PODS).values()
        return [p.requests for p in bound], sum(p.workload for p in bound)

    def valid_until(self, node: str) -> float:
        """When the node's usage next changes by itself (its first assumption expiring; monotonic clock)."""
        keys = self._assumed_by_node.get(node)
        if not keys:
            return float("inf")
        return min(self._assumed[k].expires for k in keys)
