"""The published evaluation protocol (Weng et al., ATC '23; hkust-adsl/kubernetes-scheduler-simulator).

1. Arrival order: the pod list sorted by name, shuffled with the run's seed.
2. Inflation: clones drawn uniformly from the original list (sorted by name) are appended *after* the shuffled
   originals until the next clone would push the total GPU request above ratio x capacity. Like the authors'
   `tuneUpPods`, the test adds the clone's per-GPU share (`gpu_milli`), not its whole request, so a multi-GPU
   clone can overshoot by a few GPUs and CPU-only clones never stop it. A list already above the target is cut
   by removing random pods until it is not (`tuneDownPods`).
3. Pods arrive one at a time and never leave. A pod that fits nowhere fails; its demand still counts as arrived.
4. After each arrival: the allocation ratio; near the report points also the frag ratio and idle nodes
   (`gpupack.simulator.metrics`). At the end: what stayed free and how much of it the pod sizes forced
   (`gpupack.simulator.leftover`).

One numpy Generator per run supplies, in this order, the shuffle, the clones, the node tie order and the
policy's own draws (the authors use one seeded math/rand stream the same way).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupack.simulator.cluster import ClusterState
from gpupack.simulator.leftover import Leftover, leftover
from gpupack.simulator.metrics import (
    Floats,
    FragmentationMeter,
    PointMetrics,
    arrived_points,
    point_metrics,
    window,
)
from gpupack.simulator.policy import Policy
from gpupack.simulator.trace import MILLI, PodRecord

DEFAULT_RATIO = 1.3
"""Target total GPU request of the arrival list, in multiples of the cluster's GPU capacity."""
REPORT_POINTS = (100, 130)
"""Arrived demand (% of GPU capacity) where results are reported."""
PROGRESS_EVERY = 500
"""Arrivals between two progress callbacks."""

ArrivalProgress = Callable[[int, int], None]
"""Called with (arrivals done, arrivals total)."""


def build_arrivals(
    pods: Sequence[PodRecord], capacity_milli: int, rng: np.random.Generator, ratio: float = DEFAULT_RATIO
) -> list[PodRecord]:
    """The run's arrival list: shuffled originals, then clones (or cuts) to `ratio` x capacity (see module doc)."""
    by_name = sorted(pods, key=lambda p: p.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    total = sum(p.gpu_request_milli for p in order)
    target = ratio * capacity_milli
    if total > target:
        while total > target:
            total -= order.pop(int(rng.integers(len(order)))).gpu_request_milli
    elif any(p.gpu_milli for p in by_name):
        clone = 0
        while True:
            source = by_name[int(rng.integers(len(by_name)))]
            if total + source.gpu_milli > target:
                break
            order.append(replace(source, name=f"{source.name}-tuned-{clone}"))
            total += source.gpu_request_milli
            clone += 1
    return order


@dataclass(frozen=True)
class SeedRun:
    """One policy on one arrival list: per-arrival curves and the figures at each report point."""

    seed: int
    arrived_pct: Floats
    """Arrived GPU demand after each arrival, % of capacity."""
    alloc_pct: Floats
    """Allocated GPU after each arrival, % of capacity."""
    failed: int
    at: dict[int, PointMetrics | None]
    leftover: Leftover
    """What stayed free at the end, and how much of it the pod sizes forced (`gpupack.simulator.leftover`)."""


def run_protocol(
    policy: Policy,
    state: ClusterState,
    arrivals: Sequence[PodRecord],
    meter: FragmentationMeter,
    seed: int = 0,
    points: Sequence[int] = REPORT_POINTS,
    progress: ArrivalProgress | None = None,
) -> SeedRun:
    """Place `arrivals` one by one on `state` (mutated) with `policy`, recording the protocol's metrics."""
    count = len(arrivals)
    capacity = state.total_gpus * MILLI
    if capacity <= 0:
        raise ValueError("the cluster has no GPU")
    arrived = np.cumsum(np.array([p.gpu_request_milli for p in arrivals], dtype=np.int64))
    rounded = arrived_points(arrived, capacity)
    measured = np.zeros(count, np.bool_)
    for p in points:
        measured[window(rounded, p)] = True
    allocated = np.zeros(count, np.int64)
    frag = np.full(count, np.nan)
    idle = np.full(count, np.nan)
    failed = 0
    placed_shares: Counter[int] = Counter()
    for k, pod in enumerate(arrivals):
        placement = policy.choose(pod, state, state.feasible(pod))
        if placement is None:
            failed += 1
        else:
            state.place(pod, placement)
            if pod.is_sharing:
                placed_shares[pod.gpu_milli] += 1
        allocated[k] = state.allocated_milli
        if measured[k]:
            frag[k] = meter.ratio_pct(state)
            idle[k] = state.idle_nodes()
        if progress is not None and ((k + 1) % PROGRESS_EVERY == 0 or k + 1 == count):
            progress(k + 1, count)
    alloc_pct = allocated * 100.0 / capacity
    at = {p: point_metrics(alloc_pct, frag, idle, window(rounded, p), state.total_gpus) for p in points}
    arrived_shares = Counter(p.gpu_milli for p in arrivals if p.is_sharing)
    return SeedRun(
        seed=seed,
        arrived_pct=arrived * 100.0 / capacity,
        alloc_pct=alloc_pct,
        failed=failed,
        at=at,
        leftover=leftover(state, placed_shares, arrived_shares),
    )
