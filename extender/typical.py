"""What `extender.packing` needs from the cluster: each pod's ask in milli-GPU, each node's GPUs, the typical shapes.

- A pod's ask on a node: whole GPUs (`nvidia.com/gpu`) are 1000 milli-GPU each; a time-sliced replica is
  1000 / replicas of one GPU on that node; MIG instances are not modelled here (their geometry is scored by
  `extender.score`), so a MIG pod has no ask.
- A node's GPUs: the free milli-GPU of each physical GPU, rebuilt by replaying the node's pods in the order the
  extender saw them with the device plugin's packed allocation (a replica goes to the fullest GPU that still
  fits, whole GPUs to the lowest-indexed free ones). MIG-partitioned GPUs hold nothing a whole or time-sliced
  pod can take.
- The typical shapes: FGD's most frequent pod shapes, counted over the pods the watch cache holds. They are
  re-counted when enough pods changed (a twentieth of them, at least `REFRESH_PODS`, and in the service at most
  once a minute) or after a full list, not on every event: a count over 150,000 pods takes about 0.3 s.
  DaemonSet pods are left out: every node runs them, so they would outnumber every real shape.

The replay assumes the device plugin packs replicas (NVIDIA k8s-device-plugin's packed allocation policy, v0.20
and later). Watch events come in the order pods are bound; after a (re-)list, which comes in name order, a
node's pods are replayed by the time they were bound (`extender.changes.bound_at`, to the second).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupack.core import contract
from gpupack.extender.fragmentation import ShapeKey, TypicalShapes, typical_shapes
from gpupack.extender.inventory import CPU, NodeRecord
from gpupack.extender.packing import MILLI, Ask, cpu_per_gpu, fullest_fit
from gpupack.extender.state import ClusterState, Requests

REFRESH_PODS = 16
"""Fewest pod events between two counts of the typical shapes (a small cluster's shapes settle after a few pods)."""
_UNSEEN = Ask(-1, -1, -1)
ASK_MEMO = 4096
ORDER_MEMO = 50_000
_ASKS: dict[tuple[Requests, int, frozenset[str]], Ask | None] = {}
"""`ask_of` by (requests, replicas, GPU resources offered): a cluster has few pod shapes and node kinds, and a
node's layout is replayed whenever one of its pods or assumptions changes."""
GPU_MODELS = ("gpu",)
"""The shapes' model columns: gpupack's pods choose GPU models by node selectors, so every shape accepts any GPU."""


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """A node's GPUs as `gpu_layout` rebuilt them from `record` and its pods, and how many of those pods are
    workloads (kept per node until the node changes)."""

    record: NodeRecord
    gpu_free: tuple[int, ...]
    pods: int


def ask_of(requests: Mapping[str, int] | Requests, node: NodeRecord) -> Ask | None:
    """The pod's ask on `node`: None for a MIG instance, or a time-sliced replica on a node that offers none.

    A GPU resource is one the node advertises (its `shares`, whatever the time-slicing resource is named) or one
    of NVIDIA's names. `count` replicas of `replicas` per GPU are `1000 * count // replicas` milli-GPU (rounded
    down, so that a GPU holds all its replicas); `replicas` or more of them take whole GPUs, as many as they
    cover, since the device plugin then hands out replicas of several GPUs."""
    cpu, resource, count = 0, "", 0
    shares = node.shares
    for name, n in requests.items() if isinstance(requests, Mapping) else requests:
        if name == CPU:
            cpu = n
        elif not resource and n > 0 and (name in shares or contract.is_gpu_resource(name)):
            resource, count = name, n
    if not resource:
        return Ask(cpu, 0, 0)
    if resource == contract.RESOURCE_GPU:
        return Ask(cpu, MILLI, count)
    if resource.startswith(contract.RESOURCE_MIG_PREFIX) or resource not in node.shares:
        return None
    replicas = max(node.replicas, 1)
    if count >= replicas:
        return Ask(cpu, MILLI, -(-count // replicas))
    return Ask(cpu, MILLI * count // replicas, 1)


def gpu_layout(node: NodeRecord, pods: Iterable[Requests], start: Sequence[int] | None = None) -> list[int]:
    """Free milli-GPU of each of the node's physical GPUs after its pods, placed as the device plugin packs them
    (onto `start`, a layout already built, when given)."""
    if start is not None:
        free = list(start)
    else:
        free = [MILLI] * node.gpu_count
        mig = {r: node.shares[r] for r in node.allocatable if r.startswith(contract.RESOURCE_MIG_PREFIX)}
        if mig:  # GPUs split into MIG instances take no whole GPU and no replica
            split = min(round(sum(node.allocatable[r] * s for r, s in mig.items())), node.gpu_count)
            free[node.gpu_count - split :] = [0] * split
    offered = frozenset(node.shares)  # what ask_of reads of the node, with its replicas
    for requests in pods:
        ask = _ask(requests, node, offered)
        if ask is None or ask.num_gpu == 0:
            continue
        if ask.sharing:
            gpu = fullest_fit(free, ask.gpu_milli)
            if gpu >= 0:
                free[gpu] -= ask.gpu_milli
            continue
        for i in [i for i, f in enumerate(free) if f == MILLI][: ask.num_gpu]:
            free[i] = 0
    return free


class ShapeBook:
    """The cluster's typical pod shapes and their CPU-per-GPU ratio, re-counted from the watch cache now and then."""

    def __init__(
        self,
        shapes: TypicalShapes | None = None,
        models: Sequence[str] = GPU_MODELS,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`shapes` and `models` (the columns of its access matrix, by node product) are given only when the shapes
        come from elsewhere (the trace comparison); by default they are counted from the cluster. `min_interval`:
        seconds between two counts that pod changes trigger (the service's loop must not count 150,000 pods every
        time 5 % of them changed under heavy churn; the day simulator's clock is not the wall clock, so 0)."""
        self.models = {m: i for i, m in enumerate(models)}
        self.shapes = shapes if shapes is not None else typical_shapes((), GPU_MODELS)
        self.rho = cpu_per_gpu(self.shapes)
        self.version = 0
        """Bumped on every re-count: cached decisions made with older shapes are void."""
        self.fixed = shapes is not None
        """Given shapes (tests, the trace comparison) are never re-counted."""
        self._counted_at: int | None = None
        self._lists = -1
        self._last = float("-inf")
        self.min_interval = min_interval
        self.clock = clock
        self.orders: dict[Hashable, int] = {}
        """gpupack's order of node states under these shapes (`extender.score`): many nodes share a state, and
        an assumption or a pod event moves a node into a state some other node was already in."""

    def model_id(self, product: str) -> int:
        """The access-matrix column of a node's GPU product (the first column when the shapes do not name it)."""
        return self.models.get(product, 0)

    def refresh(self, state: ClusterState) -> None:
        """Re-count when enough pods changed since the last count, after a full list, or when never counted."""
        if self.fixed:
            return
        if self._counted_at is not None and self._lists == state.pod_lists:
            if state.pod_changes - self._counted_at < max(REFRESH_PODS, len(state.pods) // 20):
                return
            if self.clock() - self._last < self.min_interval:
                return
        self._counted_at, self._lists, self._last = state.pod_changes, state.pod_lists, self.clock()
        self.shapes = typical_shapes(_shapes_of(state), GPU_MODELS)
        self.rho = cpu_per_gpu(self.shapes)
        self.orders = {}
        self.version += 1

    def remember(self, orders: Iterable[tuple[Hashable, int]]) -> None:
        """Keep computed orders (all dropped past `ORDER_MEMO` entries, or when the shapes are re-counted)."""
        if len(self.orders) >= ORDER_MEMO:
            self.orders = {}
        self.orders.update(orders)


def _shapes_of(state: ClusterState) -> Iterable[ShapeKey]:
    nodes = state.nodes
    offered: dict[str, tuple[NodeRecord, frozenset[str]]] = {}
    for pod in state.pods.values():
        if not pod.workload:  # a DaemonSet's pods would outnumber every real shape
            continue
        found = offered.get(pod.node)
        if found is None:
            node = nodes.get(pod.node)
            if node is None:
                continue
            found = offered[pod.node] = (node, frozenset(node.shares))
        ask = _ask(pod.requests, *found)
        if ask is not None:
            yield (ask.cpu_milli, ask.gpu_milli, ask.num_gpu, ())


def _ask(requests: Requests, node: NodeRecord, offered: frozenset[str]) -> Ask | None:
    """`ask_of`, kept by (requests, replicas, resources offered)."""
    key = (requests, node.replicas, offered)
    ask = _ASKS.get(key, _UNSEEN)
    if ask is _UNSEEN:
        if len(_ASKS) >= ASK_MEMO:
            _ASKS.clear()
        ask = _ASKS[key] = ask_of(requests, node)
    return ask
