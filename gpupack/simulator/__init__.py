"""Trace-driven simulator of GPU placement: the published protocol of the FGD paper and its baselines.

Entry points: `load_workload()` and `simulate()` in `gpupack.simulator.run`; policies by name in
`gpupack.simulator.policies.POLICIES`.
"""
