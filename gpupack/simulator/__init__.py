"""Trace-driven simulator of GPU placement: the published protocol of the FGD paper and its baselines.

Entry points: `load_workload()` and `simulate()` in `simulator.run`; policies by name in
`simulator.policies.POLICIES`.
"""
