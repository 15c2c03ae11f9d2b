"""The decision cache never changes an answer: after any sequence of pod events, assumptions, node updates,
live snapshots and clock moves, cached verdicts equal verdicts computed afresh."""

from __future__ import annotations

import random
from typing import Any

import pytest

import gpupack.extender.verbs as verbs
from gpupack.extender.demand import demand_of
from gpupack.extender.inventory import node_from_json
from gpupack.extender.live import EMPTY, Series, aggregate
from gpupack.extender.state import ClusterState
from gpupack.extender.verbs import DecisionCache, Decisions, View, decide
from gpupack.extender.wire import ExtenderArgs
from tests.extender_kit import A100_BALANCED, A100_BALANCED_GPUS, T4_SHARED, gpu_pod, node, policy

GPU, SHARED, MIG = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
NODES = [
    node("a100", A100_BALANCED_GPUS, A100_BALANCED),
    node("t4", {SHARED: 16}, T4_SHARED),
    node("h100", {GPU: 8}, H100),
    node("h100-spot", {GPU: 8}, {**H100, "node-type": "spot"}),
]
PODS = [gpu_pod(MIG), gpu_pod(SHARED), gpu_pod(GPU, 2, "training"), gpu_pod(SHARED, 1, "batch")]
OTHER = {"name": "q", "uid": "uid-q"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def live_snapshot(rng: random.Random, now: float) -> Any:
    series = [
        Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": n, "gpu": str(g)}, rng.uniform(0, 100), now - rng.uniform(0, 8))
        for n in ("t4", "h100", "h100-spot")
        for g in range(rng.randint(1, 4))
    ]
    return aggregate(series, None, now)


def answers(decided: Decisions) -> list[tuple[int | None, object]]:
    """What the verbs read per candidate: its score (None: unknown) and why it is filtered out (None: it is not)."""
    return [(score, decided.rejections.get(n)) for n, score in zip(decided.names, decided.scores, strict=True)]


@pytest.mark.parametrize("seed", range(12))
def test_cached_verdicts_equal_fresh_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    clock = Clock()
    monkeypatch.setattr(verbs, "time", clock)
    doc = "extender: {assumeSeconds: 3, metrics: {maxAgeSeconds: 5}}"
    pol = policy(doc)
    state = ClusterState()
    state.replace_nodes(node_from_json(n, pol) for n in NODES)
    cache = DecisionCache()
    live = EMPTY
    # with a name the cache does not know, and one listed twice
    args = ExtenderArgs({}, [n["metadata"]["name"] for n in NODES] + ["unknown", "h100"], None)
    # two pods of each shape, "p" and "q": when one is assumed on a node, the other must see it there
    others = [{**p, "metadata": {**p["metadata"], **OTHER}} for p in PODS]
    demands = [demand_of(p, pol) for p in PODS + others]
    for step in range(150):
        action = rng.randrange(8)
        target = rng.choice(["a100", "t4", "h100", "h100-spot"])
        resource = rng.choice([MIG, SHARED, GPU])
        if action == 0:
            state.upsert_pod(f"p{rng.randrange(20)}", target, ((resource, rng.randint(1, 3)), ("cpu", 1000)))
        elif action == 1:
            state.remove_pod(f"p{rng.randrange(20)}")
        elif action == 2:
            state.assume(f"a{rng.randrange(10)}", target, {resource: 1}, 3.0, clock.now)
        elif action == 3:
            clock.now += rng.uniform(0, 2.5)
        elif action == 4:
            live = live_snapshot(rng, clock.now)
        elif action == 5:
            state.upsert_node(node_from_json(rng.choice(NODES), pol))
        elif action == 6:  # a node leaves (its name, still asked about, is then unknown); it comes back later
            state.remove_node(target)
        else:  # a probed pod itself assumed, as a prioritize leaves it
            state.assume(rng.choice(["uid-p", "uid-q"]), target, rng.choice(demands).requests, 3.0, clock.now)
        for demand in demands:
            cached = answers(decide(demand, args, View(state, live, pol, "v", cache)))
            fresh = answers(decide(demand, args, View(state, live, pol, "v", None)))
            assert cached == fresh, f"step {step}, action {action}"
