"""GPU fragmentation as FGD measures it: the free GPU share that typical tasks cannot use, in exact integers.

Shared by the extender (`extender.packing` scores nodes with it) and the simulator (FGD and its metrics).

The authors' definition (`NodeGpuShareFragAmount` in hkust-adsl/kubernetes-scheduler-simulator): for each typical
task shape t of weight w_t, a node's free milli-GPU counts as fragment unless t fits the node's GPUs and CPU
("Q3"); when it fits, only the GPUs too small for t's per-GPU share count. CPU-only shapes and shapes whose
`gpu_spec` excludes the node's model count the node's whole free GPU share. The node's fragmentation is
F = sum_t w_t * frag_t.

Weights are counts over the kept shapes' total count C, so `fragmentation()` returns C * F as an int64: sums of
floats would break the many exact ties between nodes by rounding noise (SOURCE.md: several points of FGD).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]

DEFAULT_COVERAGE = 0.95
"""Share of the original pods the typical shapes cover (the artifact's `podPopularityThreshold: 95`)."""

ShapeKey = tuple[int, int, int, tuple[str, ...]]
"""(cpu_milli, gpu_milli, num_gpu, gpu_spec): what FGD sees of a pod (memory plays no part in it)."""


@dataclass(frozen=True)
class TypicalShapes:
    """The typical task shapes, as parallel arrays over shapes, and their model access on a given cluster."""

    keys: tuple[ShapeKey, ...]
    cpu: Ints
    milli: Ints
    num: Ints
    count: Ints
    access: Bools
    """[shapes, models]: whether shape t may run on GPU model m (its gpu_spec lists m, or is empty)."""

    @property
    def total(self) -> int:
        """C: the kept shapes' total count, the denominator of every weight."""
        return int(self.count.sum())

    @cached_property
    def gpu_part(self) -> _GpuShapes:
        """The GPU shapes only, grouped by per-GPU share (CPU-only shapes always count everything)."""
        gpu = self.milli > 0
        levels, which = np.unique(self.milli[gpu], return_inverse=True)
        return _GpuShapes(
            levels=levels.astype(np.int64),
            level_of=which.reshape(-1).astype(np.int64),
            cpu=self.cpu[gpu],
            num=self.num[gpu],
            count=self.count[gpu],
            access_by_model=np.ascontiguousarray(self.access[gpu].T),
        )


@dataclass(frozen=True)
class _GpuShapes:
    levels: Ints
    level_of: Ints
    cpu: Ints
    num: Ints
    count: Ints
    access_by_model: Bools
    """[models, gpu shapes]."""


def typical_shapes(
    pods: Iterable[ShapeKey], models: Sequence[str], coverage: float = DEFAULT_COVERAGE
) -> TypicalShapes:
    """The most frequent of the pods' shapes, CPU-only pods included, kept until they cover `coverage` of the pods.

    Ties in frequency are ordered like the authors' sort (descending cpu, gpu_milli, num_gpu, spec), which decides
    which shapes make the cut. `models` orders the access matrix's columns (the cluster's model ids).
    """
    counts = Counter(pods)
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3])))
    ordered.reverse()
    kept: list[tuple[ShapeKey, int]] = []
    cumulative, expected = 0, coverage * sum(counts.values())
    for key, n in ordered:
        if cumulative >= expected:
            break
        kept.append((key, n))
        cumulative += n
    keys = tuple(k for k, _ in kept)
    access = np.array([[bool(m) and (not k[3] or m in k[3]) for m in models] for k in keys], dtype=np.bool_)
    return TypicalShapes(
        keys=keys,
        cpu=np.array([k[0] for k in keys], dtype=np.int64),
        milli=np.array([k[1] for k in keys], dtype=np.int64),
        num=np.array([k[2] for k in keys], dtype=np.int64),
        count=np.array([n for _, n in kept], dtype=np.int64),
        access=access.reshape(len(keys), len(models)),
    )


def fragmentation(shapes: TypicalShapes, model: Ints, cpu_free: Ints, gpu_free: Ints) -> Ints:
    """C * F for each of K node states (model id [K], free CPU [K], free milli per GPU [K, G], absent GPUs -1).

    frag_t = total free when t does not fit (no access, too little CPU, fewer than num_t GPUs with >= milli_t
    free, or t is CPU-only); otherwise the free share of the GPUs with less than milli_t free.
    """
    part = shapes.gpu_part
    free = np.maximum(gpu_free, 0)
    total = free.sum(axis=1)
    fits = gpu_free[:, None, :] >= part.levels[None, :, None]  # [K, levels, G]
    fit_count = fits.sum(axis=2)[:, part.level_of]  # [K, gpu shapes]
    fit_share = (fits * free[:, None, :]).sum(axis=2)[:, part.level_of]
    usable = (fit_count >= part.num) & (cpu_free[:, None] >= part.cpu) & part.access_by_model[model]
    saved = (usable * fit_share) @ part.count
    result: Ints = total * shapes.total - saved
    return result


DEDUPE_ABOVE = 32
"""Batches of node states larger than this are computed once per distinct state (empty nodes of one type are many)."""


def per_distinct_state(
    fn: Callable[[Ints, Ints, Ints], tuple[Ints, ...]], model: Ints, cpu: Ints, gpus: Ints
) -> tuple[Ints, ...]:
    """`fn(model, cpu, gpus)` (arrays over node states, each result one value per state), computing each distinct
    (model, cpu, GPUs) state once when the batch is large."""
    if model.size <= DEDUPE_ABOVE:
        return fn(model, cpu, gpus)
    unique, inverse = np.unique(np.column_stack([model, cpu, gpus]), axis=0, return_inverse=True)
    index = inverse.reshape(-1)
    return tuple(values[index] for values in fn(unique[:, 0], unique[:, 1], unique[:, 2:]))


def node_fragmentation(shapes: TypicalShapes, state_model: Ints, cpu_free: Ints, gpu_free: Ints) -> Ints:
    """`fragmentation()` for many nodes at once, computing each distinct (model, cpu, GPUs) state only once."""
    (result,) = per_distinct_state(
        lambda model, cpu, gpus: (fragmentation(shapes, model, cpu, gpus),), state_model, cpu_free, gpu_free
    )
    return result
