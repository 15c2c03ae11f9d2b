"""How gpupack orders nodes for whole-GPU, time-sliced and CPU-only pods: FGD's score, then its ties broken on purpose.

The node score of fragmentation gradient descent (FGD, Weng et al., ATC '23) is `int(100 * sigmoid(dF / 1000))`,
dF the drop in the node's fragmentation (`extender.fragmentation`, milli-GPU) when the pod lands there. The
integer score makes many nodes tie (every node the pod leaves unchanged scores 50) and the reference breaks the
ties at random. gpupack keeps FGD's score first and breaks its ties with one key chosen by the pod's kind, found
on the Alibaba trace (bench/simulator/research.py records what else was tried and what it lost):

- CPU-only pod: the node with the smallest share of its GPUs free (in eighths), then the fewest whole GPUs
  free: the CPU goes where the GPUs are already taken, instead of stranding the free GPUs of a random node. A
  share, not an absolute count: counted in milli-GPU, 2-GPU nodes always looked fullest and took the CPU pods
  first, and where CPU-only load is heavy (the generated `stress-cpu60`) their GPUs were stranded for want of
  CPU (0.27 point below FGD; 0.57 above with the share);
- GPU-sharing pod: a node already running a pod before an empty one (empty nodes stay whole for whole-GPU pods,
  and removable by the autoscaler);
- one-GPU pod: the node whose CPU left afterwards strands the least free GPU share, at the CPU-per-GPU ratio of
  the typical pods (`cpu_per_gpu`), counted in quarters of a GPU (`STRANDED_STEP`): a node that runs out of CPU
  before GPU wastes its GPUs; then a node already running a pod, so that empty nodes stay whole for multi-GPU
  pods (without it, 0.06 point below FGD where multi-GPU pods are 60 % of the demand); then the least stranded
  to the milli-GPU. With the stranding key in milli-GPU first, it decided nearly every tie and the in-use key
  almost none: 0.04-0.05 point below FGD on `multigpu40` and `stress-multigpu50`;
- multi-GPU pod: the node with the fewest partly used GPUs (time-sliced GPUs with a share taken): whole-GPU
  pods go where nothing is shared, and the nodes already shared keep their free GPUs for sharing and one-GPU
  pods.

In an autoscaled cluster (`extender.keepEmptyNodes`, the default) one key comes before all of these: a GPU node
with nothing requested on it goes last unless the pod fills it, so it stays empty and Cluster Autoscaler removes
it. On a fixed cluster that key only costs packing (0.2-0.7 point of allocation on the trace), so it can be
turned off; the trace comparison runs without it.

Inside a node a sharing pod takes the fullest GPU that fits, as the NVIDIA device plugin's packed allocation
does (`SHARED_DEVICES_ALLOCATION_POLICY=packed`), and the node is scored for that GPU; whole-GPU pods take
the lowest-indexed free GPUs (any free GPUs leave the same fragmentation).

Everything is a pure function of numpy arrays over K node states (one row per node), so the simulator scores
all of a cluster's nodes at once and the extender scores the candidates of one request with the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpupack.extender.fragmentation import TypicalShapes, fragmentation

Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]

MILLI = 1000
"""Milli-GPU in one GPU."""
ABSENT = -1
"""Free milli-GPU recorded for a GPU slot a node does not have: it never fits, and `np.maximum(free, 0)` sums it
away (rows of nodes with different GPU counts share one array)."""
FGD_RESOLUTION = 100
"""FGD's integer score range: `int(100 * sigmoid(...))`."""
STRANDED_SPAN = 1000
"""Stranded milli-GPU the one-GPU pods' key tells apart (capped: a GPU or more stranded all count the same)."""
STRANDED_STEP = 250
"""The one-GPU pods' key counts stranded GPU first in steps of a quarter GPU (0..3 quarters), so that nodes that
differ by a few milli-GPU stranded go to the in-use key (tried without the milli-GPU key after it, steps of 100
or 200 milli-GPU did worse on the multi-GPU variants, 333 and 500 on the default trace)."""
MAX_NODE_GPUS = 16
FREE_EIGHTHS = 8
"""The CPU-only key counts the share of a node's GPUs left free in eighths (one GPU of an 8-GPU node)."""
TIE_SPAN = MAX_NODE_GPUS * MILLI + 1
"""Distinct values a tie key takes (the least-free-GPU key counts free milli-GPU up to 16 GPUs)."""
MIN_CPU_PER_GPU = 1e-6
NO_FIT = -1
"""The score of a node state the pod does not fit (a sharing pod with no GPU that has room)."""


@dataclass(frozen=True, slots=True)
class Ask:
    """What a pod asks of one node, as FGD sees it: CPU, its share of each GPU, and how many GPUs."""

    cpu_milli: int
    gpu_milli: int
    """Milli-GPU per GPU: 1000 for whole GPUs, less for a share of one GPU, 0 for a CPU-only pod."""
    num_gpu: int

    @property
    def sharing(self) -> bool:
        """A share of one GPU that other pods may share."""
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def gpu_request_milli(self) -> int:
        """Total milli-GPU asked."""
        return self.num_gpu * self.gpu_milli


def fgd_score(decrease: Ints, shapes: TypicalShapes, resolution: int = FGD_RESOLUTION) -> Ints:
    """`int64(100 * sigmoid(dF / 1000))`, with `decrease` = C * dF in exact integers (C: the shapes' total count);
    `resolution` replaces the 100 (the research variants try others)."""
    x = decrease / (float(shapes.total) * 1000.0 if shapes.total else 1.0)
    result: Ints = ((1.0 / (1.0 + np.exp(-x))) * float(resolution)).astype(np.int64)
    return result


def sharing_decrease(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints, Ints]:
    """For a sharing pod: every (node row, GPU column) with room for it, and C * the fragmentation drop of
    placing it there."""
    rows, cols = np.nonzero(gpus >= ask.gpu_milli)
    return rows, cols, _decrease_on(shapes, ask, model, cpu, gpus, rows, cols)


def _decrease_on(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints, rows: Ints, cols: Ints) -> Ints:
    """C * the fragmentation drop of a sharing pod placed on GPU `cols[i]` of node state `rows[i]`; the states
    before and after go through one `fragmentation()` call (it is overhead-bound)."""
    after = gpus[rows]
    after[np.arange(rows.size), cols] -= ask.gpu_milli
    frag = fragmentation(
        shapes,
        np.concatenate([model, model[rows]]),
        np.concatenate([cpu, (cpu - ask.cpu_milli)[rows]]),
        np.concatenate([gpus, after]),
    )
    decrease: Ints = frag[: model.size][rows] - frag[model.size :]
    return decrease


def whole_decrease(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints) -> Ints:
    """For a whole-GPU or CPU-only pod: C * the fragmentation drop of placing it on each node state, taking the
    lowest-indexed fully free GPUs."""
    count = model.size
    after = gpus
    if ask.num_gpu:
        whole = gpus == MILLI
        taken = whole & (np.cumsum(whole, axis=1) <= ask.num_gpu)
        after = np.where(taken, 0, gpus)
    frag = fragmentation(
        shapes,
        np.concatenate([model, model]),
        np.concatenate([cpu, cpu - ask.cpu_milli]),
        np.concatenate([gpus, after]),
    )
    result: Ints = frag[:count] - frag[count:]
    return result


def packed_gpu(ask: Ask, gpus: Ints) -> Ints:
    """Per node state, the GPU a sharing pod takes: the fullest that still fits, lowest index first; -1 if none."""
    if gpus.shape[1] == 0:  # nodes without GPUs (a device plugin restarting advertises 0)
        return np.full(gpus.shape[0], -1, np.int64)
    fits = gpus >= ask.gpu_milli
    column: Ints = np.argmin(np.where(fits, gpus, MILLI + 1), axis=1).astype(np.int64)
    result: Ints = np.where(fits.any(axis=1), column, -1)
    return result


def fullest_fit(free: list[int], milli: int) -> int:
    """`packed_gpu` for one node as plain Python (the extender replays a node's pods one at a time): the index of
    the fullest GPU with at least `milli` free, lowest index first, or -1."""
    best, best_free = -1, MILLI + 1
    for index, left in enumerate(free):
        if milli <= left < best_free:
            best, best_free = index, left
    return best


def packed_scores(shapes: TypicalShapes, ask: Ask, model: Ints, cpu: Ints, gpus: Ints) -> tuple[Ints, Ints]:
    """gpupack's FGD score of each node state (rows) and the GPU a sharing pod takes there (else -1).

    A sharing pod is scored for the GPU the device plugin will give it (`packed_gpu`); a state where it finds
    no GPU scores `NO_FIT`.
    """
    count = model.size
    if not ask.sharing:
        return fgd_score(whole_decrease(shapes, ask, model, cpu, gpus), shapes), np.full(count, -1, np.int64)
    column = packed_gpu(ask, gpus)
    rows = np.flatnonzero(column >= 0)
    score = np.full(count, NO_FIT, np.int64)
    score[rows] = fgd_score(_decrease_on(shapes, ask, model, cpu, gpus, rows, column[rows]), shapes)
    return score, column


def cpu_per_gpu(shapes: TypicalShapes) -> float:
    """Milli-cores asked per milli-GPU asked over the typical GPU shapes, weighted by their counts (1.0 if none).

    Never below `MIN_CPU_PER_GPU`: GPU pods that ask for no CPU strand nothing, and the key divides by it.
    """
    gpu = shapes.milli > 0
    asked = int((shapes.count * shapes.milli * shapes.num)[gpu].sum())
    ratio = float((shapes.count * shapes.cpu)[gpu].sum()) / asked if asked else 1.0
    return max(ratio, MIN_CPU_PER_GPU)


def partial_gpus(gpus: Ints) -> Ints:
    """Per node state (rows of free milli-GPU per GPU, `ABSENT` for slots a node lacks), its partly used GPUs."""
    result: Ints = ((gpus > 0) & (gpus < MILLI)).sum(axis=1).astype(np.int64)
    return result


def tie_key(
    ask: Ask, gpu_left: Ints, cpu_free: Ints, pod_count: Ints, rho: float, gpu_count: Ints, partial: Ints
) -> Ints:
    """The pod kind's tie-breaking key on each node (0..TIE_SPAN-1, higher is better); see the module docstring.

    `gpu_left`: the node's free milli-GPU; `cpu_free`: its free milli-cores; `pod_count`: pods on it; `rho`:
    `cpu_per_gpu` of the typical shapes; `gpu_count`: its GPUs; `partial`: its partly used GPUs
    (`partial_gpus`).
    """
    if ask.num_gpu == 0:
        # The smallest share of the node's GPUs free, in eighths, then the fewest whole GPUs free.
        count = np.maximum(gpu_count, 1)
        share = FREE_EIGHTHS - np.clip((gpu_left * FREE_EIGHTHS) // (count * MILLI), 0, FREE_EIGHTHS)
        whole = MAX_NODE_GPUS - np.clip(gpu_left // MILLI, 0, MAX_NODE_GPUS)
        result: Ints = (share * (MAX_NODE_GPUS + 1) + whole).astype(np.int64)
        return result
    if ask.sharing:
        return (pod_count > 0).astype(np.int64)
    if ask.num_gpu == 1:
        gpu_after = gpu_left - ask.gpu_request_milli
        cpu_after = cpu_free - ask.cpu_milli
        stranded = np.maximum(gpu_after - cpu_after / rho, 0.0)
        capped = np.floor(np.minimum(stranded, STRANDED_SPAN - 1))
        least = (((STRANDED_SPAN - 1) // STRANDED_STEP) - capped // STRANDED_STEP).astype(np.int64)
        in_use = (pod_count > 0).astype(np.int64)  # then a node in use: empty nodes stay whole
        finest = (STRANDED_SPAN - 1 - capped).astype(np.int64)  # then the least stranded, to the milli-GPU
        result = (least * 2 + in_use) * STRANDED_SPAN + finest
        return result
    result = (MAX_NODE_GPUS - np.clip(partial, 0, MAX_NODE_GPUS)).astype(np.int64)  # fewest partly used GPUs
    return result


def stays_open(ask: Ask, gpu_requested: Bools, gpu_count: Ints) -> Bools:
    """Nodes an autoscaled cluster should place the pod on before any empty GPU node: a node with some GPU share
    requested, a node without GPUs, or an empty node the pod fills (every GPU of it)."""
    fills = ask.num_gpu > 0 and not ask.sharing
    result: Bools = gpu_requested | (gpu_count == 0) | (fills & (gpu_count == ask.num_gpu))
    return result


def order_key(score: Ints, tie: Ints, open_first: Bools | None = None) -> Ints:
    """The lexicographic node order: FGD score first, the tie key second (`NO_FIT` stays below every fit).

    With `open_first` (`stays_open`, when the policy keeps empty nodes empty) those nodes come before the others.
    """
    key = score * TIE_SPAN + tie
    if open_first is not None:
        key = key + open_first * ((FGD_RESOLUTION + 1) * TIE_SPAN)
    result: Ints = np.where(score >= 0, key, NO_FIT)
    return result
