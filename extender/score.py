"""How much a pod should go to a node, 0..10 (kube-scheduler's MaxExtenderPriority); pure functions.

Three scoring policies, chosen by `extender.scoring`:

- `spread`, the default scheduler's LeastAllocated: the mean over the pod's resources (cpu, memory, its GPU
  resource) of the free fraction left after placing it. The baseline.
- `binpack`, MostAllocated: the mean of the used fractions after placing it.
- `gpupack`, an order rather than a score (`priorities` turns it into 10, 9, ... by rank, so kube-scheduler
  sees which node comes first, not by how much):
  - whole GPUs, time-sliced replicas and CPU-only pods: `extender.packing`'s order. With `keepEmptyNodes` (the
    default) a GPU node with nothing requested comes last unless the pod fills it (Cluster Autoscaler can remove
    it); then FGD's fragmentation score against the cluster's typical pod shapes, with its ties broken by pod
    kind (the rule measured on the Alibaba trace). Among equals, a time-sliced pod then prefers the node whose
    best GPU is closest to the target load (`load` below): GPUs already busy but not hot;
  - MIG instances: `1 + 9 * (wp*packing + wl*load + wf*fragmentation) / (wp + wl + wf)`, and 0 (ranked last)
    on a node whose GPUs are all unrequested unless the pod fills it (empty nodes stay empty for the autoscaler),
    with
      packing       = the node's GPUs requested after placing the pod, in physical GPUs' worth, over its GPUs;
      load          = target-load shape of the live utilization u of the node's best GPU (Trimaran's
                      TargetLoadPacking, on GPUs, with target T):  u <= T: (1 - T) * u / T + T,
                      u > T: T * (1 - u) / (1 - T);  0.5 when no GPU of the node has fresh data;
      fragmentation = 1 when an instance of the pod's resource is already taken on a GPU that still offers
                      one (the pod fills a split GPU instead of splitting an intact one: with N instances of
                      the resource per GPU, the node's used count is not a multiple of N), 0.5 when the node's
                      GPUs are in use by other resources, 0 when they are all intact.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

from gpupack.core import contract
from gpupack.core.policy import Policy
from gpupack.extender.demand import PodDemand
from gpupack.extender.inventory import CPU, MEMORY
from gpupack.extender.packing import ABSENT, Ask, order_key, packed_scores, partial_gpus, stays_open, tie_key
from gpupack.extender.snapshot import NodeSnapshot
from gpupack.extender.typical import ShapeBook, ask_of

MAX_SCORE = 10
NEUTRAL_LOAD = 0.5


def _fractions_after(demand: PodDemand, snap: NodeSnapshot) -> list[float]:
    """Used fraction of each of the pod's resources (cpu, memory, GPU) after placing it."""
    out: list[float] = []
    resources = [CPU, MEMORY] + ([demand.gpu_resource] if demand.gpu_resource else [])
    for resource in resources:
        capacity = snap.node.allocatable.get(resource, 0)
        if capacity > 0:
            after = snap.used.get(resource, 0) + demand.requests.get(resource, 0)
            out.append(min(after / capacity, 1.0))
    return out


def spread(demand: PodDemand, snap: NodeSnapshot) -> int:
    """LeastAllocated: more free capacity left, higher score."""
    used = _fractions_after(demand, snap)
    return round(MAX_SCORE * (1 - sum(used) / len(used))) if used else 0


def binpack(demand: PodDemand, snap: NodeSnapshot) -> int:
    """MostAllocated: less free capacity left, higher score."""
    used = _fractions_after(demand, snap)
    return round(MAX_SCORE * sum(used) / len(used)) if used else 0


def target_load(util: float, target: float) -> float:
    """Rises from `target` at idle to 1 at `target`, then falls to 0 at full load (all in 0..1)."""
    if util <= target:
        return (1 - target) * util / target + target
    return max(target * (1 - util) / (1 - target), 0.0)


def fragmentation(demand: PodDemand, snap: NodeSnapshot) -> float:
    """1: the pod completes a GPU already split for its resource; 0.5: the node is in use; 0: intact."""
    resource = demand.gpu_resource
    node = snap.node
    if resource is None or node.gpu_count <= 0:
        return 0.0
    per_gpu = node.allocatable.get(resource, 0) / node.gpu_count
    used = snap.used.get(resource, 0)
    if per_gpu > 1 and used % per_gpu:
        return 1.0
    return 0.5 if not snap.empty else 0.0


def mig_score(demand: PodDemand, snap: NodeSnapshot, policy: Policy) -> int:
    """The MIG blend, 0..10 (see the module docstring)."""
    node = snap.node
    resource = demand.gpu_resource
    capacity = node.gpu_capacity
    if resource is None or capacity <= 0:
        return 0
    share = node.shares.get(resource, 1.0)
    packing = min((snap.gpu_used + demand.gpu_count * share) / capacity, 1.0)
    if snap.empty and packing < 1.0:
        return 0
    weights = policy.extender.weights
    total = weights.packing + weights.load + weights.fragmentation
    blend = (
        weights.packing * packing
        + weights.load * live_load(snap, policy)
        + weights.fragmentation * fragmentation(demand, snap)
    ) / total
    return 1 + round(9 * blend)


def live_load(snap: NodeSnapshot, policy: Policy) -> float:
    """`target_load` of the node's best GPU, `NEUTRAL_LOAD` without fresh data."""
    target = policy.extender.target_utilization
    return max((target_load(u, target) for u in snap.utils), default=NEUTRAL_LOAD)


def gpupack_orders(demand: PodDemand, snaps: Sequence[NodeSnapshot], policy: Policy, book: ShapeBook) -> list[int]:
    """The project's node order for each snapshot, higher first (see the module docstring).

    Nodes where the pod asks the same (a time-sliced replica is a different share on nodes with different
    replicas) are scored in one vectorized `extender.packing` call: a request names hundreds of nodes.
    """
    resource = demand.gpu_resource
    if resource is not None and resource.startswith(contract.RESOURCE_MIG_PREFIX):
        return [mig_score(demand, snap, policy) for snap in snaps]
    keep_empty = policy.extender.keep_empty_nodes
    memo = book.orders
    out = [0] * len(snaps)
    groups: dict[Ask, list[tuple[int, OrderKey]]] = {}
    for i, snap in enumerate(snaps):
        ask = ask_of(demand.requests, snap.node)
        if ask is None:
            continue
        node = snap.node
        free_cpu, model = snap.free(CPU), book.model_id(node.product)
        key = (ask, model, free_cpu, snap.gpu_free, snap.pods > 0, snap.empty, node.gpu_count, keep_empty)
        order = memo.get(key)
        if order is None:
            groups.setdefault(ask, []).append((i, key))
        else:
            out[i] = _with_load(order, ask, snap, policy)
    for ask, rows in groups.items():
        _orders(ask, [key for _, key in rows], book)
        for i, key in rows:
            out[i] = _with_load(memo[key], ask, snaps[i], policy)
    return out


OrderKey = tuple[Ask, int, int, tuple[int, ...], bool, bool, int, bool]
"""What a node's order depends on besides the shapes: the ask, GPU model column, free CPU, per-GPU free shares,
whether it runs pods, whether it is empty of GPU requests, its GPU count, and `keepEmptyNodes`."""


def _orders(ask: Ask, keys: list[OrderKey], book: ShapeBook) -> None:
    """Compute the orders of node states the book has not seen, in one vectorized call, into `book.orders`."""
    width = max(len(key[3]) for key in keys)
    gpus = np.full((len(keys), width), ABSENT, dtype=np.int64)
    for row, key in enumerate(keys):
        gpus[row, : len(key[3])] = key[3]
    model = np.array([key[1] for key in keys], dtype=np.int64)
    cpu = np.array([key[2] for key in keys], dtype=np.int64)
    score, _ = packed_scores(book.shapes, ask, model, cpu, gpus)
    in_use = np.array([key[4] for key in keys], dtype=np.int64)
    count = np.array([key[6] for key in keys], dtype=np.int64)
    tie = tie_key(ask, np.maximum(gpus, 0).sum(axis=1), cpu, in_use, book.rho, count, partial_gpus(gpus))
    open_first = None
    if keys[0][7]:  # keepEmptyNodes
        requested = np.array([not key[5] for key in keys], dtype=np.bool_)
        open_first = stays_open(ask, requested, count)
    book.remember(zip(keys, order_key(score, tie, open_first).tolist(), strict=True))


def _with_load(order: int, ask: Ask, snap: NodeSnapshot, policy: Policy) -> int:
    """Last, for replicas among otherwise equal nodes: the GPU load nearest the target. Every order gets the same
    radix, so a request whose pod is a replica on some nodes and whole GPUs on others compares alike."""
    if order < 0:
        return order
    load = round(MAX_SCORE * live_load(snap, policy)) if ask.sharing else 0
    return order * (MAX_SCORE + 1) + load


def scores(demand: PodDemand, snaps: Sequence[NodeSnapshot], policy: Policy, book: ShapeBook) -> list[int]:
    """The score of the policy's scoring mode on each node: 0..10 for `spread` and `binpack`, an order for
    `gpupack`."""
    mode = policy.extender.scoring
    if mode == "spread":
        return [spread(demand, snap) for snap in snaps]
    if mode == "binpack":
        return [binpack(demand, snap) for snap in snaps]
    return gpupack_orders(demand, snaps, policy, book)


def score(demand: PodDemand, snap: NodeSnapshot, policy: Policy, book: ShapeBook) -> int:
    """`scores` of one node."""
    return scores(demand, [snap], policy, book)[0]


def priorities(scores: Sequence[int | None], policy: Policy) -> list[int]:
    """What the extender answers kube-scheduler, 0..10 per node (None: a node it does not know, 0).

    `spread` and `binpack` scores are already 0..10. `gpupack` orders become ranks: the best nodes 10, the next
    distinct value 9, and so on down to 1.
    """
    if policy.extender.scoring != "gpupack":
        return [0 if s is None else s for s in scores]
    distinct = set(scores)
    distinct.discard(None)
    best = sorted(distinct, reverse=True)[: MAX_SCORE - 1]  # type: ignore[type-var]  # (a C sort beats nlargest here)
    rank: dict[int | None, int] = {s: MAX_SCORE - i for i, s in enumerate(best)}
    rank[None] = 0
    return list(map(rank.get, scores, repeat(1)))
