"""Research candidates for gpupack's placement score: FGD's integer score with its ties broken on purpose.

FGD's node score `int(100 * sigmoid(-dF / 1000))` (see `gpupack.simulator.fgd`) leaves many nodes tied, and the
reference breaks the ties with a random node order. The candidates here keep FGD's score as the primary key and break
its ties lexicographically, `key = ((fgd_score * span_1 + key_1) * span_2 + key_2) ...`, then by the run's node order,
with secondary keys chosen by the pod's kind (CPU-only, sharing, whole-GPU).

The winner, `k34` below, became gpupack's node order (`extender.packing`, run on the trace by
`gpupack.simulator.gpupack`), with one change: there a sharing pod takes the fullest GPU that fits, like the device
plugin's packed allocation, instead of FGD's best-scoring GPU (it did as well or better).

No parameter depends on the trace. Other keys and variants explored (CPU balance, best fit on GPU for GPU pods,
tighter GPU choice, score resolution, shapes weighted by GPU demand) are registered under their own names in
`POLICIES_RESEARCH` for reproduction. Built on the `gpupack.simulator.policy` seam and `gpupack.simulator.fgd` /
`extender.fragmentation`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpupack.extender.fragmentation import TypicalShapes
from gpupack.extender.packing import (
    FGD_RESOLUTION,
    Ask,
    cpu_per_gpu,
    fgd_score,
    order_key,
    sharing_decrease,
    whole_decrease,
)
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.fgd import ShapeScoreCache, StateScorer, fgd_states, place_on
from gpupack.simulator.gpupack import GpupackPolicy
from gpupack.simulator.policy import Bools, Ints, Policy, PolicyContext, PolicyFactory
from gpupack.simulator.trace import MILLI, PodRecord

NODE_MILLI = 8 * MILLI
"""Most milli-GPU one node has (8 GPUs)."""

SecondaryFn = Callable[[PodRecord, ClusterState, Ints], Ints]
"""A tie-breaking key of each candidate node for the pod: integers in [0, span), higher is better."""


@dataclass(frozen=True)
class Key:
    """One secondary key and the number of distinct values it takes (its radix in the lexicographic key)."""

    fn: SecondaryFn
    span: int


def gpu_pack_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """Best fit on GPU: 8000 minus the node's free milli-GPU after the placement (0..8000)."""
    after = state.gpu_left[nodes] - pod.gpu_request_milli
    result: Ints = (NODE_MILLI - np.clip(after, 0, NODE_MILLI)).astype(np.int64)
    return result


def used_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """1 on nodes that already run a pod, 0 on empty nodes (empty nodes stay whole)."""
    result: Ints = (state.pod_count[nodes] > 0).astype(np.int64)
    return result


def gpu_used_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """1 on nodes with some GPU share taken, 0 on nodes whose GPUs are all free."""
    result: Ints = (state.gpu_left[nodes] < state.gpu_count[nodes] * MILLI).astype(np.int64)
    return result


def cpu_pack_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """Best fit on CPU by whole cores: fewer cores left after the placement first (0..255)."""
    cores = (state.cpu_free[nodes] - pod.cpu_milli) // 1000
    result: Ints = (255 - np.clip(cores, 0, 255)).astype(np.int64)
    return result


GPU_PACK = Key(gpu_pack_key, NODE_MILLI + 1)
USED = Key(used_key, 2)
GPU_USED = Key(gpu_used_key, 2)
CPU_PACK = Key(cpu_pack_key, 256)


def cpu_balance_key(rho: float, buckets: int = 1000) -> Key:
    """Less GPU stranded by CPU after the placement: `buckets - 1 - min(stranded, buckets - 1)`.

    Stranded = the free milli-GPU the node's remaining CPU cannot feed at `rho` milli-cores per milli-GPU.
    """

    def key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
        gpu_after = state.gpu_left[nodes] - pod.gpu_request_milli
        cpu_after = state.cpu_free[nodes] - pod.cpu_milli
        stranded = np.maximum(gpu_after - cpu_after / rho, 0.0)
        result: Ints = (buckets - 1 - np.minimum(stranded, buckets - 1)).astype(np.int64)
        return result

    return Key(key, buckets)


@dataclass(frozen=True)
class KindKeys:
    """Secondary keys by pod kind: CPU-only pods, sharing pods, whole-GPU pods."""

    cpu_only: tuple[Key, ...] = ()
    sharing: tuple[Key, ...] = ()
    whole: tuple[Key, ...] = ()

    def of(self, pod: PodRecord) -> tuple[Key, ...]:
        """The keys that break the pod's ties."""
        if pod.num_gpu == 0:
            return self.cpu_only
        return self.sharing if pod.is_sharing else self.whole


def same_keys(keys: Sequence[Key]) -> KindKeys:
    """The same keys for every pod kind."""
    return KindKeys(tuple(keys), tuple(keys), tuple(keys))


def lex_states(tight_gpu: bool, resolution: int) -> StateScorer:
    """FGD's state scorer, at another `resolution`, or with a sharing pod's GPU ties (equal FGD score inside the
    node) going to the GPU with the least free share instead of the lowest index (`tight_gpu`)."""
    if not tight_gpu and resolution == FGD_RESOLUTION:
        return fgd_states

    def scorer(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints]:
        count = model.size
        if not ask.sharing:
            decrease = whole_decrease(shapes, ask, model, cpu, gpus)
            return fgd_score(decrease, shapes, resolution), np.full(count, -1, np.int64)
        rows, cols, decrease = sharing_decrease(shapes, ask, model, cpu, gpus)
        slack = gpus[rows, cols] - ask.gpu_milli if tight_gpu else np.full(rows.size, MILLI - 1)
        grid = np.full(gpus.shape, -1, np.int64)
        grid[rows, cols] = fgd_score(decrease, shapes, resolution) * MILLI + (MILLI - 1 - slack)
        choice: Ints = np.argmax(grid, axis=1).astype(np.int64)
        best: Ints = grid[np.arange(count), choice]
        return np.where(best >= 0, best // MILLI, -1), np.where(best >= 0, choice, -1)

    return scorer


class FgdLexPolicy:
    """FGD's integer node score first, then the pod kind's secondary keys in order, then the run's node order."""

    def __init__(
        self,
        shapes: TypicalShapes,
        tiebreak: Ints,
        keys: KindKeys | None = None,
        tight_gpu: bool = False,
        resolution: int = FGD_RESOLUTION,
    ) -> None:
        self.tiebreak = tiebreak
        self.keys = keys or KindKeys()
        self.cache = ShapeScoreCache(shapes, lex_states(tight_gpu, resolution))

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """The feasible node with the best (FGD score, secondary keys, node order), then the GPU(s) inside it."""
        candidates = np.flatnonzero(feasible)
        if candidates.size == 0:
            return None
        score, gpu = self.cache.scores(pod, state)
        key: Ints = score[candidates]
        for k in self.keys.of(pod):
            key = key * k.span + k.fn(pod, state, candidates)
        best = candidates[key == key.max()]
        node = int(best[np.argmax(self.tiebreak[best])])
        return place_on(pod, state, node, int(gpu[node]))


def demand_weighted(shapes: TypicalShapes, mix: float = 1.0) -> TypicalShapes:
    """The shapes reweighted by their GPU demand (count x milli x num), mixed with the count weights.

    weight = (1 - mix) * count + mix * count * milli * num * (C / total demand), rounded to integers; CPU-only
    shapes keep `(1 - mix) * count` (dropped at mix = 1). mix = 0 gives FGD's weights.
    """
    demand = shapes.count * shapes.milli * shapes.num
    scaled = demand * (shapes.total / max(int(demand.sum()), 1))
    count = np.rint((1.0 - mix) * shapes.count + mix * scaled).astype(np.int64)
    keep = count > 0
    return TypicalShapes(
        keys=tuple(k for k, kept in zip(shapes.keys, keep, strict=True) if kept),
        cpu=shapes.cpu[keep],
        milli=shapes.milli[keep],
        num=shapes.num[keep],
        count=count[keep],
        access=shapes.access[keep],
    )


def used_fed_key(rho: float, empty_second: bool = False) -> Key:
    """A node in use whose CPU left after the placement still feeds its free GPU at `rho` milli-cores per milli-GPU.

    1 on such nodes, 0 elsewhere; `empty_second`: 2 on them, 1 on empty nodes, 0 on in-use nodes the pod would
    leave with GPU stranded by CPU.
    """

    def key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
        gpu_after = state.gpu_left[nodes] - pod.gpu_request_milli
        cpu_after = state.cpu_free[nodes] - pod.cpu_milli
        fed = cpu_after >= rho * gpu_after
        used = state.pod_count[nodes] > 0
        if empty_second:
            result: Ints = np.where(used, np.where(fed, 2, 0), 1).astype(np.int64)
        else:
            result = (used & fed).astype(np.int64)
        return result

    return Key(key, 3 if empty_second else 2)


def whole_fit_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """Best fit on whole free GPUs: 8 minus the node's fully free GPUs after the placement (0..8)."""
    after = state.full_count[nodes] - pod.num_gpu
    result: Ints = (8 - np.clip(after, 0, 8)).astype(np.int64)
    return result


def exact_whole_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """1 where the pod takes every fully free GPU the node has left (no whole GPU left over), else 0."""
    result: Ints = (state.full_count[nodes] == pod.num_gpu).astype(np.int64)
    return result


WHOLE_FIT = Key(whole_fit_key, 9)
EXACT_WHOLE = Key(exact_whole_key, 2)


def single_gpu_only(key: Key) -> Key:
    """`key` for pods asking for one GPU (or a share of one); a constant 0 (no preference) for multi-GPU pods."""

    def fn(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
        if pod.num_gpu > 1:
            return np.zeros(nodes.size, np.int64)
        return key.fn(pod, state, nodes)

    return Key(fn, key.span)


def not_empty_key(pod: PodRecord, state: ClusterState, nodes: Ints) -> Ints:
    """0 on a node whose GPUs are all free and more than the pod takes (it would break a whole node), else 1."""
    empty = state.gpu_left[nodes] == state.gpu_count[nodes] * MILLI
    result: Ints = (~empty | (state.gpu_count[nodes] == pod.num_gpu)).astype(np.int64)
    return result


NOT_EMPTY = Key(not_empty_key, 2)


class GpupackMultiKeyPolicy(GpupackPolicy):
    """gpupack (`gpupack.simulator.gpupack`) with a tie-breaking key for multi-GPU pods, which gpupack leaves to FGD
    alone."""

    def __init__(self, shapes: TypicalShapes, tiebreak: Ints, key: Key) -> None:
        super().__init__(shapes, tiebreak)
        self.key = key

    def _order(self, pod: PodRecord, state: ClusterState, nodes: Ints, score: Ints) -> Ints:
        if pod.num_gpu > 1:
            return order_key(score[nodes], self.key.fn(pod, state, nodes))
        return super()._order(pod, state, nodes, score)


def multi_key_factory(key: Key) -> PolicyFactory:
    """A factory of `GpupackMultiKeyPolicy` with `key`."""
    return lambda ctx: GpupackMultiKeyPolicy(ctx.shapes, ctx.tiebreak, key)


KeysOf = Callable[[PolicyContext], Sequence[Key] | KindKeys]
"""The secondary keys of a run (a run-dependent key, like CPU balance, reads the run's shapes)."""


def lex_factory(
    keys: KeysOf = lambda ctx: (), tight_gpu: bool = False, resolution: int = FGD_RESOLUTION, mix: float = 0.0
) -> PolicyFactory:
    """A factory of `FgdLexPolicy`; `mix` > 0 reweights FGD's shapes by GPU demand (`demand_weighted`)."""

    def factory(ctx: PolicyContext) -> Policy:
        shapes = demand_weighted(ctx.shapes, mix) if mix else ctx.shapes
        chosen = keys(ctx)
        kinds = chosen if isinstance(chosen, KindKeys) else same_keys(chosen)
        return FgdLexPolicy(shapes, ctx.tiebreak, kinds, tight_gpu, resolution)

    return factory


GPUPACK_KEYS = KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(USED,))
"""The best rule found: CPU-only pods to the node with the least free GPU, GPU pods to a node already in use."""


def gpupack_lex_policy(ctx: PolicyContext) -> Policy:
    """FGD's score, ties broken by `GPUPACK_KEYS`, then by the run's node order (candidate for `gpupack`)."""
    return FgdLexPolicy(ctx.shapes, ctx.tiebreak, GPUPACK_KEYS)


def _balance(ctx: PolicyContext, buckets: int = 1000) -> Key:
    return cpu_balance_key(cpu_per_gpu(ctx.shapes), buckets)


def _used_fed(ctx: PolicyContext, empty_second: bool = False) -> Key:
    return used_fed_key(cpu_per_gpu(ctx.shapes), empty_second)


POLICIES_RESEARCH: dict[str, PolicyFactory] = {
    "gpupack_lex": gpupack_lex_policy,
    # Everything below was measured for the report (bench/simulator/research.py docstring lists the winner).
    "fgd_lex": lex_factory(),  # no secondary key: identical to fgd (check of the seam)
    # one key for every pod kind
    "gp_tight": lex_factory(tight_gpu=True),
    "gp_pack": lex_factory(lambda ctx: (GPU_PACK,)),
    "gp_used": lex_factory(lambda ctx: (USED,)),
    "gp_pack_tight": lex_factory(lambda ctx: (GPU_PACK,), tight_gpu=True),
    "gp_used_pack": lex_factory(lambda ctx: (USED, GPU_PACK)),
    "gp_cpu": lex_factory(lambda ctx: (_balance(ctx),)),
    "gp_used_cpu": lex_factory(lambda ctx: (USED, _balance(ctx))),
    "gp_cpu_used": lex_factory(lambda ctx: (_balance(ctx), USED)),
    # FGD's score at another resolution, and shapes weighted by GPU demand
    "gp_r25": lex_factory(resolution=25),
    "gp_r50": lex_factory(resolution=50),
    "gp_r200": lex_factory(resolution=200),
    "gp_r50_used": lex_factory(lambda ctx: (USED,), resolution=50),
    "gp_dw": lex_factory(mix=1.0),
    "gp_dw50": lex_factory(mix=0.5),
    "gp_dw50_used": lex_factory(lambda ctx: (USED,), mix=0.5),
    # keys by pod kind
    "k1": lex_factory(lambda ctx: KindKeys(cpu_only=(_balance(ctx), GPU_PACK))),
    "k2": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,))),
    "k3": lex_factory(lambda ctx: KindKeys(cpu_only=(_balance(ctx), GPU_PACK), sharing=(USED,), whole=(USED,))),
    "k4": lex_factory(
        lambda ctx: KindKeys(cpu_only=(_balance(ctx), GPU_PACK), sharing=(_balance(ctx),), whole=(_balance(ctx),))
    ),
    "k5": lex_factory(
        lambda ctx: KindKeys(cpu_only=(_balance(ctx), GPU_PACK), sharing=(USED,), whole=(USED, GPU_PACK))
    ),
    "k6": lex_factory(lambda ctx: GPUPACK_KEYS),  # = gpupack_lex
    "k7": lex_factory(
        lambda ctx: KindKeys(cpu_only=(_balance(ctx), GPU_PACK), sharing=(USED, _balance(ctx)), whole=(USED,))
    ),
    "k8": lex_factory(lambda ctx: GPUPACK_KEYS, tight_gpu=True),
    "k9": lex_factory(lambda ctx: GPUPACK_KEYS, resolution=50),
    "k10": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(GPU_USED,), whole=(GPU_USED,))),
    "k11": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK, CPU_PACK), sharing=(USED,), whole=(USED,))),
    "k12": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED, GPU_PACK), whole=(USED, GPU_PACK))),
    "k13": lex_factory(lambda ctx: GPUPACK_KEYS, resolution=200),
    # the "node in use" key for sharing pods only (cpu037 lost 0.10 with it on whole-GPU pods too)
    "k14": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,))),
    # whole-GPU pods: conditions on the "node in use" key (k6 gains on default, loses on cpu037)
    "k15": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_used_fed(ctx),))),
    "k16": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_used_fed(ctx, True),))),
    "k17": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(GPU_USED,))),
    "k18": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(WHOLE_FIT,))),
    "k19": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(EXACT_WHOLE,))),
    "k20": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(USED, _balance(ctx)))),
    "k21": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_balance(ctx), USED))),
    "k22": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(EXACT_WHOLE, USED))),
    # whole-GPU pods by CPU balance first (k21's neighbours)
    "k23": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_balance(ctx),))),
    "k24": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(_balance(ctx), USED), whole=(_balance(ctx), USED))
    ),
    "k25": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED, _balance(ctx)), whole=(_balance(ctx), USED))
    ),
    "k26": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_balance(ctx, NODE_MILLI + 1), USED))
    ),
    "k27": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_balance(ctx), USED, GPU_PACK))
    ),
    "k28": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_used_fed(ctx, True), USED))),
    # ablations of k23 (CPU-only: GPU_PACK, sharing: USED, whole: CPU balance)
    "k29": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), whole=(_balance(ctx),))),
    "k30": lex_factory(lambda ctx: KindKeys(sharing=(USED,), whole=(_balance(ctx),))),
    "k31": lex_factory(lambda ctx: KindKeys(whole=(_balance(ctx),))),
    "k32": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(_balance(ctx), EXACT_WHOLE))),
    "k33": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(EXACT_WHOLE, _balance(ctx)))),
    # CPU balance for one-GPU pods only (multigpu40 lost ~0.03 with it on multi-GPU pods). k34 is the best found
    # here: >= fgd on every variant (10 seeds on default/cpu037/cpu072/multigpu40), unlike k6 on cpu037.
    "k34": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(single_gpu_only(_balance(ctx)),))
    ),
    "k35": lex_factory(
        lambda ctx: KindKeys(cpu_only=(GPU_PACK,), sharing=(USED,), whole=(single_gpu_only(_balance(ctx)), USED))
    ),
    "k36": lex_factory(lambda ctx: KindKeys(cpu_only=(GPU_PACK,), whole=(single_gpu_only(_balance(ctx)),))),
    # gpupack itself with a key for multi-GPU pods (multigpu40, where gpupack ties fgd: all within +-0.013 over
    # 20 seeds, none clear of the noise)
    "m_wholefit": multi_key_factory(WHOLE_FIT),
    "m_exact": multi_key_factory(EXACT_WHOLE),
    "m_gpuused": multi_key_factory(GPU_USED),
    "m_notempty": multi_key_factory(NOT_EMPTY),
}
"""Policy name -> factory, to pass as `simulate(..., registry={**POLICIES, **POLICIES_RESEARCH})`."""
