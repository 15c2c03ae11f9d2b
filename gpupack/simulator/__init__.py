"""Trace-driven simulator of GPU placement: the published protocol of the FGD paper and its baselines, and (in
`day/`) the synthetic day through the webhook and the extender.

Entry points: `load_workload()` and `simulate()` in `gpupack.simulator.run`; policies by name in
`gpupack.simulator.policies.POLICIES`; `gpupack.simulator.day.simulate.run_day` for the day.
"""
