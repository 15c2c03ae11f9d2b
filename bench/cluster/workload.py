"""The scenario's day as what the cluster benchmark does to a living cluster, in simulated minutes: the Deployments
(one per inference workload) with their replica counts over the day, and the Jobs (one per arrival) with when
they are created and how long their pod runs. Built from the simulator's own builders (`replica_pod`,
`job_arrivals`, `replicas_at`), so the living cluster and the simulator run the same pods at the same times.

An arm writes the pods its way: as the scenario's teams write them for gpupack (labels), or as they would without
it (`without_gpupack`: whole GPUs, no labels), the same model pinned in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpupack.simulator.day.cluster import job_arrivals, replica_pod
from gpupack.simulator.day.scenario import Scenario, replicas_at

PodWriter = Callable[[dict[str, Any]], dict[str, Any]]
"""How an arm writes a pod from the scenario's raw one."""


@dataclass(frozen=True, slots=True)
class Scale:
    """At `minute`, Deployment `name` in `namespace` to `replicas`."""

    minute: float
    namespace: str
    name: str
    replicas: int


@dataclass(frozen=True, slots=True)
class JobStart:
    """At `minute`, a Job `name` of one pod, running `run_minutes` once started."""

    minute: float
    namespace: str
    name: str
    pod: dict[str, Any]
    run_minutes: float
    kind: str


@dataclass(frozen=True, slots=True)
class Day:
    """The day's Deployments (name -> (namespace, pod template)), their scaling and the Jobs, minutes from the
    start of the warm-up; `measured_from` is where the measured day starts."""

    deployments: dict[str, tuple[str, dict[str, Any]]]
    scales: tuple[Scale, ...]
    jobs: tuple[JobStart, ...]
    minutes: float
    measured_from: float


def day_of(scenario: Scenario) -> Day:
    """The scenario's day as events (pods as the scenario's teams write them for gpupack)."""
    step = scenario.step_minutes
    total = scenario.warmup_steps + scenario.steps
    deployments = {w.name: (w.namespace, replica_pod(w, 0)) for w in scenario.inference}
    scales: list[Scale] = []
    for workload in scenario.inference:
        last = None
        for s in range(total):
            hour = (s - scenario.warmup_steps) * step / 60
            target = replicas_at(workload, hour, scenario.scale)
            if target != last:
                scales.append(Scale(s * step, workload.namespace, workload.name, target))
                last = target
    jobs = tuple(
        JobStart(
            a.step * step,
            a.pod["metadata"]["namespace"],
            a.pod["metadata"]["name"],
            a.pod,
            a.run_steps * step,
            a.kind,
        )
        for a in job_arrivals(scenario)
    )
    return Day(
        deployments, tuple(sorted(scales, key=lambda e: e.minute)), jobs, total * step, scenario.warmup_steps * step
    )
