"""What a run leaves unallocated at its end, and how much of it no placement of the run's pods could have used.

The issue asks how close to 100 % allocation a policy gets and what stands in the way. At 130 % arrived
demand on the Alibaba trace nearly everything left is shares of GPUs, and much of it is forced by the pod sizes
themselves: a GPU holding an 810-milli pod has 190 milli left that only pods of 190 milli or less can use. If
the arrival list holds fewer of those small pods than there is such room, the difference stays free under
*any* placement of them. `forced_remnant` turns that into a lower bound over every room size; policies that
tie (fgd and gpupack on `multigpu40`) both sit on top of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpupack.simulator.cluster import ClusterState
from gpupack.simulator.trace import MILLI

HALF = MILLI // 2
"""A share larger than half a GPU is alone of its size on that GPU, so it leaves exactly `1000 - share` room."""


@dataclass(frozen=True, slots=True)
class Leftover:
    """The free GPU capacity at a run's end, split by what could still use it."""

    whole_gpus: int
    """GPUs with nothing on them (free, but on nodes short of CPU or memory, or of a model no pod left wants)."""
    share_milli: int
    """Free milli-GPU on GPUs that already hold a share."""
    forced_milli: int
    """A lower bound of `share_milli` that no arrangement of the run's small pods could fill (`forced_remnant`)."""
    forced_room: int
    """The room size (milli) at which that bound is reached: rooms of this size or less beside larger shares."""


def forced_remnant(large_shares: Mapping[int, int], small_demand: Mapping[int, int]) -> tuple[int, int]:
    """A lower bound of the milli-GPU that stays free beside the large shares, and the room size that gives it.

    `large_shares`: share size (milli, > 500) -> pods of that size placed (each alone of its size on its GPU,
    leaving `1000 - size` room). `small_demand`: share size -> pods of that size that arrived (placed or not).
    The room of size r or less can only be taken by pods of size r or less, so at least
    `sum(room <= r) - demand(size <= r)` of it stays free, whatever went where; the bound is the largest such
    difference over r (0 when the small pods could fill every room).
    """
    if any(size <= HALF or size >= MILLI for size in large_shares):
        raise ValueError(f"large shares must be between {HALF} and {MILLI} milli exclusive: {sorted(large_shares)}")
    best, best_room = 0, 0
    for room in sorted({MILLI - size for size in large_shares}):
        rooms = sum((MILLI - size) * count for size, count in large_shares.items() if MILLI - size <= room)
        fill = sum(size * count for size, count in small_demand.items() if size <= room)
        if rooms - fill > best:
            best, best_room = rooms - fill, room
    return best, best_room


def leftover(state: ClusterState, placed_shares: Mapping[int, int], arrived_shares: Mapping[int, int]) -> Leftover:
    """The free GPU capacity of `state` at a run's end; `placed_shares` / `arrived_shares`: share size (milli)
    -> sharing pods of that size placed / arrived in the run."""
    free = state.gpu_free[state.gpu_free >= 0]
    large = {size: count for size, count in placed_shares.items() if size > HALF and count}
    forced, room = forced_remnant(large, arrived_shares)
    return Leftover(
        whole_gpus=int(np.count_nonzero(free == MILLI)),
        share_milli=int(free[free < MILLI].sum()),
        forced_milli=forced,
        forced_room=room,
    )
