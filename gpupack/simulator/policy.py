"""The placement-policy seam: a policy sees the pod and the cluster and returns a node and the GPUs inside it.

Scores are integers like the reference simulator's (kube-scheduler scores are int64), so equal scores are real
ties. Ties go to the node that comes first in a random per-run node order (the authors prefix node names with a
seeded permutation; the scheduler then takes the first best node), never to the lowest index.

A new policy is a `PolicyFactory`: `POLICIES["name"] = lambda ctx: ScoredPolicy(my_scorer)` where
`my_scorer(pod, state, candidates)` returns one integer per candidate node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from gpupack.extender.fragmentation import TypicalShapes
from gpupack.simulator.cluster import ClusterState, Placement
from gpupack.simulator.devices import packed_placement
from gpupack.simulator.trace import PodRecord

Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]


class Policy(Protocol):
    """Chooses where a pod goes among the nodes it fits on."""

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """A placement on a node where `feasible` is True, or None when there is none."""
        ...


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may depend on for one run (one seed): its random stream, tie order and FGD's shapes."""

    rng: np.random.Generator
    tiebreak: Ints
    """Per node: larger wins ties. `n - 1 - rank` in the run's random node order."""
    shapes: TypicalShapes
    state: ClusterState
    """The run's cluster (empty at creation time), for policies that precompute per-node data."""


PolicyFactory = Callable[[PolicyContext], Policy]
NodeScorer = Callable[[PodRecord, ClusterState, Ints], Ints]
"""Integer score of each candidate node index for the pod (higher is better)."""
GpuChooser = Callable[[ClusterState, int, PodRecord], Placement]
"""The GPUs a pod takes inside its chosen node."""


def pick(scores: Ints, candidates: Ints, tiebreak: Ints) -> int:
    """The candidate with the highest score, ties to the largest `tiebreak` (first in the run's node order)."""
    size = tiebreak.size
    key = scores * size + tiebreak[candidates]
    return int(candidates[int(np.argmax(key))])


class ScoredPolicy:
    """argmax of an integer node score over the feasible nodes, then a GPU choice inside the winner."""

    def __init__(self, scorer: NodeScorer, tiebreak: Ints, gpus: GpuChooser = packed_placement) -> None:
        self.scorer = scorer
        self.tiebreak = tiebreak
        self.gpus = gpus

    def choose(self, pod: PodRecord, state: ClusterState, feasible: Bools) -> Placement | None:
        """Score the feasible nodes and place the pod on the best one."""
        candidates = np.flatnonzero(feasible)
        if candidates.size == 0:
            return None
        node = pick(self.scorer(pod, state, candidates), candidates, self.tiebreak)
        return self.gpus(state, node, pod)
