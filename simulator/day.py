"""The guide's before/after check on a synthetic day: the demo's pipeline, in-process and time-stepped.

Every step (one minute by default): Deployments scale to their daily curve (new replicas are admitted by the
webhook's `plan()`; scaled-down replicas are deleted newest first), training and batch jobs arrive and finish,
then each pending pod is scheduled as kube-scheduler with the gpupack extender would: the scheduler's own
filters (`demo.scheduler`), the extender's `verdict()` on each feasible node (the function behind `/filter` and
`/prioritize`, on a `snapshot()` of a `ClusterState` holding the bound pods and of live GPU utilizations made
from the pods' own), the scores combined like kube-scheduler (`final_scores`, ties broken at random like its
`selectHost`), and the pod bound. A pod that fits nowhere stays pending and is retried the next step.

    scenario = load_scenario(Path("scenarios/synthetic-day.yaml"))
    results = {s: run_day(scenario, s) for s in ("spread", "gpupack")}
    compare(scenario, results)          # the guide's numbers per policy
    plot_day(results, Path("day.png"))

`gpupack simulate --scenario FILE [--scale F] [--hours H] [--json] [--plot FILE]` prints the comparison.
Not modelled: preemption, spot interruptions, Cluster Autoscaler actually removing or adding nodes (removable
node-hours are what it could save, measured on the fixed cluster), GPU choice inside a node (GPUs in use are
`demo.report.gpus_in_use`'s device-plugin packing estimate).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from demo.report import gpus_in_use
from demo.scheduler import final_scores, fits, preferred_affinity, selects, tolerates
from extender.demand import demand_of
from extender.inventory import NodeRecord, node_from_json
from extender.live import LiveMetrics, NodeUtils
from extender.score import priorities
from extender.state import ClusterState
from extender.typical import ShapeBook
from extender.verbs import View, judge, snapshot
from gpupack.kube import facts_from_lists
from gpupack.policy import Policy, ScoringPolicy
from simulator.day_cluster import JobArrival, ReplicaDraws, cluster_nodes, job_arrivals, replica_pod
from simulator.day_metrics import DayResult, Meter, SimPod, comparison
from simulator.day_plot import plot_day
from simulator.day_scenario import Scenario, ScenarioError, load_scenario, replicas_at
from webhook.mutate import MutationContext, plan
from webhook.patches import apply_patch

__all__ = ["DayResult", "ScenarioError", "compare", "load_scenario", "plot_day", "run_all", "run_day"]
SCORINGS: tuple[ScoringPolicy, ...] = ("spread", "gpupack")
DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "synthetic-day.yaml"


def day_policy(scenario: Scenario, scoring: ScoringPolicy) -> Policy:
    """The scenario's policy document with `extender.scoring` set: the one thing that differs between runs."""
    doc = dict(scenario.policy)
    doc["extender"] = {**(doc.get("extender") or {}), "scoring": scoring}
    return Policy.model_validate(doc)


class _Day:
    """One run: the cluster, the pods, the clock. Mutable; `run_day` is the pure entry point."""

    def __init__(self, scenario: Scenario, scoring: ScoringPolicy) -> None:
        self.scenario = scenario
        self.policy = day_policy(scenario, scoring)
        nodes = cluster_nodes(scenario)
        self.node_json = {n["metadata"]["name"]: n for n in nodes}
        self.records: dict[str, NodeRecord] = {
            name: node_from_json(n, self.policy) for name, n in self.node_json.items()
        }
        self.labels = {name: n["metadata"].get("labels") or {} for name, n in self.node_json.items()}
        self.context = MutationContext(self.policy, f"day-{scoring}", facts_from_lists(None, {"items": nodes}))
        self.state = ClusterState()
        self.book = ShapeBook()
        """The typical pod shapes, re-counted from the running pods as the extender does."""
        self.state.replace_nodes(self.records.values())
        self.rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, 2]))
        self.draws = ReplicaDraws(scenario)
        self.arrivals = job_arrivals(scenario)
        self.next_arrival = 0
        self.replicas: list[list[SimPod]] = [[] for _ in scenario.inference]
        self.ordinals = [0 for _ in scenario.inference]
        self.pending: dict[str, SimPod] = {}
        self.ends: dict[int, list[SimPod]] = {}
        self.work: dict[str, float] = dict.fromkeys(self.records, 0.0)
        self.static: dict[tuple[bytes, str], bool] = {}
        self.meter = Meter(scenario, self.records)
        self.seq = 0

    # pods ---------------------------------------------------------------------------------------------------
    def admit(self, raw: dict[str, Any], busy: float, step: int, stream: str, run_steps: int | None) -> SimPod | None:
        """The webhook's decision applied to the raw pod, as the API server stores it; None when denied."""
        decision = plan(raw, raw["metadata"]["namespace"], self.context)
        self.meter.created += 1
        if not decision.allowed:
            self.meter.denied += 1
            return None
        self.seq += 1
        sim = self.sim_pod(apply_patch(raw, decision.ops), busy, step, stream, run_steps)
        self.pending[sim.demand.key] = sim
        return sim

    def sim_pod(self, pod: dict[str, Any], busy: float, step: int, stream: str, run_steps: int | None) -> SimPod:
        """The simulator's record of an admitted pod: its demand, priority and scheduling constraints."""
        spec = pod["spec"]
        constraints = orjson.dumps(
            [spec.get("affinity"), spec.get("nodeSelector"), spec.get("tolerations")], option=orjson.OPT_SORT_KEYS
        )
        demand = demand_of(pod, self.policy)
        priority = int(spec.get("priority") or 0)
        return SimPod(pod, demand, priority, busy, step, self.seq, stream, constraints, run_steps)

    def delete(self, sim: SimPod) -> None:
        """A deleted pod frees its node at once (no graceful termination in the model)."""
        self.pending.pop(sim.demand.key, None)
        if sim.node is not None:
            self.state.remove_pod(sim.demand.key)
            self.work[sim.node] -= sim.gpu_work
            sim.node = None

    # the step's events --------------------------------------------------------------------------------------
    def finish_jobs(self, step: int) -> None:
        """Jobs whose run time is over leave."""
        for sim in self.ends.pop(step, []):
            self.delete(sim)

    def scale_deployments(self, step: int) -> None:
        """Each Deployment to its replicas at this time: new replicas admitted, newest deleted first."""
        hour = (step - self.scenario.warmup_steps) * self.scenario.step_minutes / 60
        for index, workload in enumerate(self.scenario.inference):
            alive = self.replicas[index]
            target = replicas_at(workload, hour, self.scenario.scale)
            while len(alive) > target:
                self.delete(alive.pop())
            while len(alive) < target:
                self.ordinals[index] += 1
                ordinal = self.ordinals[index]
                busy = self.draws.busy(index, ordinal)
                sim = self.admit(replica_pod(workload, ordinal), busy, step, workload.name, None)
                if sim is None:
                    break
                alive.append(sim)

    def arrive_jobs(self, step: int) -> None:
        """Training and batch jobs created at this step."""
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].step <= step:
            job: JobArrival = self.arrivals[self.next_arrival]
            self.next_arrival += 1
            self.admit(job.pod, job.busy, step, job.pod["metadata"]["name"].rsplit("-", 1)[0], job.run_steps)

    # scheduling ---------------------------------------------------------------------------------------------
    def live(self, step: int) -> LiveMetrics:
        """What DCGM would report at the start of the step: each node's work spread over its GPUs in use."""
        now = self.clock(step)
        summary: dict[str, NodeUtils] = {}
        for name, record in self.records.items():
            in_use = gpus_in_use(record, self.state.used(name, now))
            util = min(self.work[name] / in_use, 1.0) if in_use else 0.0
            summary[name] = NodeUtils((util,) * in_use + (0.0,) * max(record.gpu_count - in_use, 0), now)
        return LiveMetrics({}, now, summary, now, step + 1)

    def clock(self, step: int) -> float:
        """Seconds since the start of the run (the state's and the live data's clock)."""
        return step * self.scenario.step_minutes * 60.0

    def statically_ok(self, sim: SimPod, name: str) -> bool:
        """kube-scheduler's node selector, required affinity and taint filters (cached per constraints and node)."""
        key = (sim.constraints, name)
        found = self.static.get(key)
        if found is None:
            node = self.node_json[name]
            found = selects(sim.pod, self.labels[name]) and tolerates(sim.pod, node.get("spec", {}).get("taints") or [])
            self.static[key] = found
        return found

    def choose(self, sim: SimPod, view: View, now: float) -> str | None:
        """The node kube-scheduler would bind `sim` to, or None when no node passes every filter."""
        demand = sim.demand
        candidates = [
            record
            for name, record in self.records.items()
            if self.statically_ok(sim, name) and fits(demand.requests, record.allocatable, self.state.used(name))
        ]
        found = judge(demand, [snapshot(r, view, now, now) for r in candidates], self.policy, view.book)
        passed = {r.name: v.score for r, v in zip(candidates, found, strict=True) if v.rejection is None}
        if len(passed) <= 1:  # kube-scheduler skips scoring with one feasible node
            return next(iter(passed), None)
        answered = dict(zip(passed, priorities(list(passed.values()), self.policy), strict=True))
        totals = final_scores(answered, {n: preferred_affinity(sim.pod, self.labels[n]) for n in passed})
        best = max(totals.values())
        ties = [n for n, total in totals.items() if total == best]
        return ties[int(self.rng.integers(len(ties)))] if len(ties) > 1 else ties[0]

    def schedule(self, step: int) -> None:
        """Pending pods by priority then age, like the scheduling queue; a shape that failed waits for next step."""
        now = self.clock(step)
        if self.policy.extender.scoring == "gpupack":
            self.book.refresh(self.state)
        view = View(self.state, self.live(step), self.policy, book=self.book)
        failed: set[tuple[object, ...]] = set()
        for sim in sorted(self.pending.values(), key=lambda p: (-p.priority, p.created, p.seq)):
            shape = (sim.demand.shape, sim.constraints)
            if shape in failed:
                continue
            node = self.choose(sim, view, now)
            if node is None:
                failed.add(shape)
                continue
            self.bind(sim, node, step)

    def bind(self, sim: SimPod, node: str, step: int) -> None:
        """The pod runs on `node`: counted in the state (what the extender's watch would show) and in the work."""
        del self.pending[sim.demand.key]
        self.state.upsert_pod(sim.demand.key, node, tuple(sim.demand.requests.items()))
        record = self.records[node]
        sim.node = node
        sim.gpu_work = sim.busy * sum(n * record.shares.get(r, 0.0) for r, n in sim.demand.requests.items())
        self.work[node] += sim.gpu_work
        if sim.run_steps is not None:
            self.ends.setdefault(step + sim.run_steps, []).append(sim)

    def run(self) -> DayResult:
        """Every step of the warm-up and the day; only the day is measured."""
        for step in range(self.scenario.warmup_steps + self.scenario.steps):
            self.finish_jobs(step)
            self.scale_deployments(step)
            self.arrive_jobs(step)
            self.schedule(step)
            self.meter.record(step, self.state, self.work, self.pending.values())
        return self.meter.result(self.policy.extender.scoring)


def run_day(scenario: Scenario, scoring: ScoringPolicy) -> DayResult:
    """Simulate the scenario's day under one extender scoring policy; deterministic given the scenario's seed."""
    return _Day(scenario, scoring).run()


def run_all(scenario: Scenario, scorings: tuple[ScoringPolicy, ...] = SCORINGS) -> dict[str, DayResult]:
    """The day under each scoring policy (same seed, so the same arrivals)."""
    return {scoring: run_day(scenario, scoring) for scoring in scorings}


def compare(scenario: Scenario, results: Mapping[str, DayResult] | None = None) -> dict[str, Any]:
    """The guide's numbers under spread and gpupack (run now unless given), and gpupack's change against spread."""
    return comparison(scenario, results if results is not None else run_all(scenario))
