"""mig-plan on a synthetic-day scenario (`--scenario FILE`): its MIG nodes, and the demand of its first hours.

The scenario's Deployments follow their daily curves (`gpupack.simulator.day.scenario.replicas_at`); one replica of each
is sized by the webhook (`demand.pod_demand`, every profile of the MIG models offered), and the demand is the
largest total per MIG resource over the steps of the first `hours`: what a planner watching the cluster that long
would have seen. Training and batch jobs are not counted (the shipped day gives them whole GPUs or time-slices).
"""

from __future__ import annotations

import math

from gpupack.core.policy import Policy
from gpupack.migplan.demand import mig_nodes, pod_demand, sizing_context
from gpupack.migplan.solve import PROFILE_PREFIX, MigNode, PlanError
from gpupack.report.cluster import from_objects
from gpupack.simulator.day.cluster import cluster_nodes, replica_pod
from gpupack.simulator.day.scenario import Scenario, replicas_at


def scenario_nodes(scenario: Scenario, policy: Policy) -> list[MigNode]:
    """The scenario's MIG nodes as the planner sees them (all free: the day starts empty)."""
    nodes = [{**n, "kind": "Node"} for n in cluster_nodes(scenario)]
    found, _ = mig_nodes(from_objects(nodes, "scenario"), policy)
    return found


def scenario_demand(scenario: Scenario, policy: Policy, nodes: list[MigNode], hours: float) -> dict[str, int]:
    """The peak total of MIG instances per resource over the first `hours` of the day (at most the day's)."""
    if not 0 < hours <= scenario.hours:
        raise PlanError(f"--demand-hours {hours:g}: the scenario's day has {scenario.hours:g} hours")
    context = sizing_context(policy, (n.model for n in nodes))
    per_replica = [
        {r: n for r, n in pod_demand(replica_pod(w, 1), context, resize=True).items() if r.startswith(PROFILE_PREFIX)}
        for w in scenario.inference
    ]
    peak: dict[str, int] = {}
    steps = max(1, math.ceil(hours * 60 / scenario.step_minutes))
    for step in range(steps):
        hour = step * scenario.step_minutes / 60
        total: dict[str, int] = {}
        for workload, sized in zip(scenario.inference, per_replica, strict=True):
            replicas = replicas_at(workload, hour, scenario.scale)
            for resource, n in sized.items():
                total[resource] = total.get(resource, 0) + n * replicas
        for resource, n in total.items():
            peak[resource] = max(peak.get(resource, 0), n)
    return dict(sorted(peak.items()))
