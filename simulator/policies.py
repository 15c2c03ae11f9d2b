"""The registry of placement policies by name.

`gpupack` is left to the extender: register the extender's own scoring function (the same code `/prioritize`
runs) with `POLICIES["gpupack"] = lambda ctx: ScoredPolicy(scorer, ctx.tiebreak)`, where `scorer(pod, state,
candidates)` returns an integer score per candidate node. Nothing here imports the extender.
"""

from __future__ import annotations

from simulator.baselines import bestfit_policy, binpack_policy, dotproduct_policy, random_policy, spread_policy
from simulator.fgd import fgd_policy
from simulator.policy import PolicyFactory

POLICIES: dict[str, PolicyFactory] = {
    "random": random_policy,
    "spread": spread_policy,
    "binpack": binpack_policy,
    "bestfit": bestfit_policy,
    "dotproduct": dotproduct_policy,
    "fgd": fgd_policy,
}
"""Policy name -> factory building one policy instance per run (seed)."""
