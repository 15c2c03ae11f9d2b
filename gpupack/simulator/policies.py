"""The registry of placement policies by name: the published baselines, FGD, and gpupack (the extender's order)."""

from __future__ import annotations

from gpupack.simulator.baselines import bestfit_policy, binpack_policy, dotproduct_policy, random_policy, spread_policy
from gpupack.simulator.fgd import fgd_policy
from gpupack.simulator.gpupack import gpupack_autoscaled_policy, gpupack_policy
from gpupack.simulator.policy import PolicyFactory

POLICIES: dict[str, PolicyFactory] = {
    "random": random_policy,
    "spread": spread_policy,
    "binpack": binpack_policy,
    "bestfit": bestfit_policy,
    "dotproduct": dotproduct_policy,
    "fgd": fgd_policy,
    "gpupack": gpupack_policy,
    "gpupack-autoscaled": gpupack_autoscaled_policy,
}
"""Policy name -> factory building one policy instance per run (seed)."""
