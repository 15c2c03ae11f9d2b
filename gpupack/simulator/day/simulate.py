"""The guide's (docs/method.md) before/after check on a synthetic day: the demo's pipeline, in-process and time-stepped.

Every step (one minute by default): Deployments scale to their daily curve (new replicas are created; scaled-down
replicas are deleted newest first), training and batch jobs arrive and finish, then each pending pod is scheduled
and bound. A pod that fits nowhere stays pending and is retried the next step. Three runs share that loop and its
meter, and differ in two things only, how a pod is created and how kube-scheduler ranks nodes:

- `none`, the cluster without gpupack: pods as developers write them without it (`without_gpupack`: whole GPUs,
  no CPU or memory requests, no spot toleration, no PriorityClass) on the same machines with MIG and
  time-slicing off (`cluster_nodes(partitioned=False)`: every GPU advertised whole), no webhook;
  kube-scheduler alone, its own filters (`gpupack.placement.scheduler`) and LeastAllocated (`extender.score.spread`, the
  function the `spread` run's extender answers with), no extender filter and no live utilization: nothing of
  gpupack is called.
- `spread` and `gpupack`: every pod admitted by the webhook's `plan()`; kube-scheduler's filters, then the
  extender's `verdict()` on each feasible node (the function behind `/filter` and `/prioritize`, on a `snapshot()`
  of a `ClusterState` holding the bound pods and of live GPU utilizations made from the pods' own) under that
  `extender.scoring`, the scores combined like kube-scheduler (`final_scores`).

Ties are broken at random like kube-scheduler's `selectHost`.

    scenario = load_scenario(Path("scenarios/synthetic-day.yaml"))
    results = run_all(scenario)         # {"none": ..., "spread": ..., "gpupack": ...}
    compare(scenario, results)          # the guide's numbers per run
    plot_day(results, Path("day.png"))

`gpupack simulate --scenario FILE [--scale F] [--hours H] [--json] [--plot FILE]` prints the comparison.
A pod that fits nowhere preempts as kube-scheduler's DefaultPreemption does (`gpupack.placement.preemption`), with the
extender's preempt verb in the runs with gpupack unless `run_day(preemption=...)` says otherwise; a victim's Job
starts again with the work it had saved by checkpoints (`checkpointMinutes`), a ReplicaSet's replica is replaced.
The meter counts the victims, those killed on a node their preemptor never ran on, and the GPU-hours of work lost.
Not modelled: spot interruptions, Cluster Autoscaler actually removing or adding nodes (removable
node-hours are what it could save, measured on the fixed cluster), GPU choice inside a node (GPUs in use are
`gpupack.placement.accounting.gpus_in_use`'s device-plugin packing estimate).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from gpupack.core.checkout import REPOSITORY
from gpupack.core.kube import facts_from_lists
from gpupack.core.objects import priority_of
from gpupack.core.policy import Policy, ScoringPolicy
from gpupack.extender.demand import demand_of
from gpupack.extender.live import LiveMetrics
from gpupack.extender.verbs import View
from gpupack.placement.accounting import gpus_in_use
from gpupack.placement.choice import Placement, constraints_of
from gpupack.placement.preemption import Running
from gpupack.placement.scheduler import fits
from gpupack.simulator.day.cluster import (
    JobArrival,
    NodeLayoutSpec,
    ReplicaDraws,
    cluster_nodes,
    job_arrivals,
    node_names,
    replica_pod,
    without_gpupack,
)
from gpupack.simulator.day.metrics import WITHOUT, DayResult, Meter, SimPod, comparison
from gpupack.simulator.day.plot import plot_day
from gpupack.simulator.day.scenario import Scenario, ScenarioError, load_scenario, replicas_at
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch

__all__ = [
    "RUNS",
    "WITHOUT",
    "DayResult",
    "Run",
    "ScenarioError",
    "compare",
    "load_scenario",
    "plot_day",
    "run_all",
    "run_day",
]
Preemption = Literal["verb", "scheduler", "off"]
"""How a pod that fits nowhere preempts: `verb`, kube-scheduler's DefaultPreemption with the extender's preempt verb
(the shipped configuration); `scheduler`, kube-scheduler's alone (a configuration without `preemptVerb`, and the
cluster without gpupack); `off`, never."""
Run = ScoringPolicy | Literal["none"]
"""A run's key: `none` (WITHOUT: the cluster without gpupack), else the extender's scoring policy."""
RUNS: tuple[Run, ...] = (WITHOUT, "spread", "gpupack")
DEFAULT_SCENARIO = REPOSITORY / "scenarios" / "synthetic-day.yaml"
NO_LIVE = LiveMetrics({}, 0.0)
"""What kube-scheduler alone reads of DCGM: nothing."""


def day_policy(scenario: Scenario, scoring: ScoringPolicy) -> Policy:
    """The scenario's policy document with `extender.scoring` set: the one thing that differs between the runs
    with gpupack."""
    doc = dict(scenario.policy)
    doc["extender"] = {**(doc.get("extender") or {}), "scoring": scoring}
    return Policy.model_validate(doc)


class _Day:
    """One run: the cluster, the pods, the clock. Mutable; `run_day` is the pure entry point.

    The run decides two strategies, chosen here once: `make_pod` (the webhook's decision, or the pod as written
    without gpupack) and the `Placement`'s ranking (the extender's answers, or kube-scheduler's own
    LeastAllocated). The policy is
    read in every run for what the cluster's objects say (the spot label, the time-slicing resource name); the
    run without gpupack reads it in `spread` scoring, the LeastAllocated it scores with.
    """

    def __init__(
        self,
        scenario: Scenario,
        run: Run,
        layouts: Mapping[str, NodeLayoutSpec] | None = None,
        preemption: Preemption = "verb",
    ) -> None:
        self.scenario = scenario
        self.run_name = run
        self.with_gpupack = run != WITHOUT
        self.preemption = preemption
        self.policy = day_policy(scenario, "spread" if run == "none" else run)  # (WITHOUT, spelled for mypy)
        nodes = cluster_nodes(scenario, partitioned=self.with_gpupack, layouts=layouts)
        self.placement = Placement(
            nodes,
            self.policy,
            np.random.default_rng(np.random.SeedSequence([scenario.seed, 2])),
            extender=self.with_gpupack,
        )
        self.records = self.placement.records
        self.state = self.placement.state
        self.book = self.placement.book
        self.context = MutationContext(self.policy, f"day-{run}", facts_from_lists(None, {"items": nodes}))
        """What the webhook's `plan()` reads besides the pod (the run without gpupack never calls it)."""
        self.draws = ReplicaDraws(scenario)
        self.arrivals = job_arrivals(scenario)
        self.next_arrival = 0
        self.replicas: list[list[SimPod]] = [[] for _ in scenario.inference]
        self.ordinals = [0 for _ in scenario.inference]
        self.pending: dict[str, SimPod] = {}
        self.bound: dict[str, SimPod] = {}
        self.preempted_for: dict[str, list[tuple[int, str, int, float]]] = {}
        """Per preemptor waiting for its node: each preemption made for it (step, node, victims, GPU-hours lost)."""
        self.respawns = 0
        self.ends: dict[int, list[SimPod]] = {}
        self.work: dict[str, float] = dict.fromkeys(self.records, 0.0)
        self.meter = Meter(scenario, self.records)
        self.seq = 0
        self.make_pod: Callable[[dict[str, Any]], dict[str, Any] | None] = (
            self.through_webhook if self.with_gpupack else without_gpupack
        )
        groups = dict(node_names(scenario))
        self.prices = {n: groups[n].price_per_hour or 0.0 for n in self.records}
        """Each node's price per hour (its group's; 0 when the scenario gives none)."""
        self.by_price = sorted(self.records, key=lambda n: (self.prices[n], list(self.records).index(n)))
        """Nodes in the order an autoscaler makes them: cheapest group first, then the scenario's order."""
        self.arriving: dict[str, int] = {}
        """Nodes provisioned and the step they take pods from."""
        self.empty_since: dict[str, int | None] = {}
        if scenario.autoscaling is not None:
            self.placement.absent = set(self.records)

    # pods ---------------------------------------------------------------------------------------------------
    def admit(
        self, raw: dict[str, Any], busy: float, step: int, stream: str, run_steps: int | None, kind: str
    ) -> SimPod | None:
        """The pod created from the raw one, as the API server stores it (`make_pod`); None when the webhook
        denies it. The class the scenario gave the pod (`kind`) is kept for the meter: a pod without gpupack
        carries none."""
        self.meter.created += 1
        pod = self.make_pod(raw)
        if pod is None:
            self.meter.denied += 1
            return None
        self.seq += 1
        sim = self.sim_pod(pod, busy, step, stream, run_steps, kind)
        self.pending[sim.demand.key] = sim
        return sim

    def through_webhook(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        """The webhook's `plan()` applied to the raw pod; None when it denies the pod."""
        decision = plan(raw, raw["metadata"]["namespace"], self.context)
        return apply_patch(raw, decision.ops) if decision.allowed else None

    def sim_pod(
        self,
        pod: dict[str, Any],
        busy: float,
        step: int,
        stream: str,
        run_steps: int | None,
        kind: str = "",
        checkpoint_steps: int | None = None,
    ) -> SimPod:
        """The simulator's record of a created pod: its demand, priority and scheduling constraints."""
        demand = demand_of(pod, self.policy)
        priority = priority_of(pod)
        return SimPod(
            pod, demand, priority, busy, step, self.seq, stream, constraints_of(pod), run_steps, kind, checkpoint_steps
        )

    def delete(self, sim: SimPod, step: int | None = None) -> None:
        """A deleted pod frees its node at once (no graceful termination in the model); a preemptor deleted while
        it waited made its victims die for nothing."""
        if self.pending.pop(sim.demand.key, None) is not None and step is not None:
            self.settle(sim, None, step)
        if sim.node is not None:
            self.state.remove_pod(sim.demand.key)
            self.bound.pop(sim.demand.key, None)
            self.work[sim.node] -= sim.gpu_work
            sim.node = None

    # the step's events --------------------------------------------------------------------------------------
    def finish_jobs(self, step: int) -> None:
        """Jobs whose run time is over leave."""
        for sim in self.ends.pop(step, []):
            if sim.node is not None:  # (a preempted job's pod is gone already)
                self.delete(sim, step)

    def scale_deployments(self, step: int) -> None:
        """Each Deployment to its replicas at this time: new replicas admitted, newest deleted first."""
        hour = (step - self.scenario.warmup_steps) * self.scenario.step_minutes / 60
        for index, workload in enumerate(self.scenario.inference):
            alive = self.replicas[index]
            target = replicas_at(workload, hour, self.scenario.scale)
            while len(alive) > target:
                self.delete(alive.pop(), step)
            while len(alive) < target:
                self.ordinals[index] += 1
                ordinal = self.ordinals[index]
                busy = self.draws.busy(index, ordinal)
                sim = self.admit(replica_pod(workload, ordinal), busy, step, workload.name, None, "inference")
                if sim is None:
                    break
                alive.append(sim)

    def arrive_jobs(self, step: int) -> None:
        """Training and batch jobs created at this step."""
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].step <= step:
            job: JobArrival = self.arrivals[self.next_arrival]
            self.next_arrival += 1
            stream = job.pod["metadata"]["name"].rsplit("-", 1)[0]
            sim = self.admit(job.pod, job.busy, step, stream, job.run_steps, job.kind)
            if sim is not None:
                sim.checkpoint_steps = job.checkpoint_steps

    # scheduling ---------------------------------------------------------------------------------------------
    def live(self, step: int) -> LiveMetrics:
        """What DCGM would report at the start of the step: each node's work spread over its GPUs in use."""
        return self.placement.live(self.work, self.clock(step), step + 1)

    def clock(self, step: int) -> float:
        """Seconds since the start of the run (the state's and the live data's clock)."""
        return step * self.scenario.step_minutes * 60.0

    def schedule(self, step: int) -> None:
        """Pending pods by priority then age, like the scheduling queue (`Placement.place`); a pod that fits
        nowhere preempts (`preempt`) unless the run's preemption is off."""
        now = self.clock(step)
        live = self.live(step) if self.with_gpupack else NO_LIVE  # kube-scheduler alone reads no DCGM
        view = self.placement.view(live)
        queue = sorted(self.pending.values(), key=lambda p: (-p.priority, p.created, p.seq))
        self.placement.place(
            queue,
            view,
            now,
            lambda sim, node: self.bind(sim, node, step),
            None if self.preemption == "off" else lambda sim: self.preempt(sim, view, step),
        )

    def bind(self, sim: SimPod, node: str, step: int) -> None:
        """The pod runs on `node`: counted in the state (what the extender's watch would show) and in the work."""
        del self.pending[sim.demand.key]
        self.placement.bind(sim, node, self.clock(step))
        self.bound[sim.demand.key] = sim
        record = self.records[node]
        sim.node = node
        sim.started = step
        sim.gpus_held = sum(n * record.shares.get(r, 0.0) for r, n in sim.demand.requests.items())
        sim.gpu_work = sim.busy * sim.gpus_held
        self.work[node] += sim.gpu_work
        if sim.run_steps is not None:
            self.ends.setdefault(step + sim.run_steps, []).append(sim)
        self.settle(sim, node, step)

    # preemption ---------------------------------------------------------------------------------------------
    def preempt(self, sim: SimPod, view: View, step: int) -> str | None:
        """kube-scheduler's preemption for a pod that fits nowhere (`Placement.preemption`): the victims are
        deleted, and their controllers create them again (`respawn`). Returns the node the pod is nominated to,
        None when nothing was deleted."""
        if sim.pod["spec"].get("preemptionPolicy") == "Never":
            return None
        running: dict[str, list[Running]] = {}
        for key, pod in self.bound.items():
            assert pod.node is not None
            running.setdefault(pod.node, []).append(
                Running(key, pod.node, pod.priority, float(pod.started), pod.demand.requests)
            )
        found = self.placement.preemption(
            sim, sim.priority, running, view, self.clock(step), verb=self.preemption == "verb"
        )
        if found is None:
            return None
        node, victims = found
        lost = [(self.bound[v.key], self.lost_steps(self.bound[v.key], step)) for v in victims]
        hours = self.scenario.step_minutes / 60
        gpu_hours = [(victim.kind or "other", victim.gpus_held * steps * hours) for victim, steps in lost]
        self.meter.preempted(step, gpu_hours)
        self.preempted_for.setdefault(sim.demand.key, []).append(
            (step, node, len(victims), sum(h for _, h in gpu_hours))
        )
        for victim, steps in lost:
            self.delete(victim)
            self.respawn(victim, step, steps)
        return node

    @staticmethod
    def lost_steps(sim: SimPod, step: int) -> int:
        """Steps of a running pod's work that die with it: all of it, or what it did since its last checkpoint."""
        ran = step - sim.started
        return ran % sim.checkpoint_steps if sim.checkpoint_steps else ran

    def respawn(self, victim: SimPod, step: int, lost: int) -> None:
        """The victim's controller creates its pod again: a Job's with the work left (what it saved by
        checkpoints is not done twice), a ReplicaSet's as a new replica in its place."""
        self.respawns += 1  # (not counted as created: each victim is, once)
        pod = copy.deepcopy(victim.pod)
        meta = pod["metadata"]
        for field in ("name", "uid"):  # its own pod: another name, another uid (the key when it has one)
            if field in meta:
                meta[field] = f"{meta[field]}-r{self.respawns}"
        run = None if victim.run_steps is None else victim.run_steps - (step - victim.started) + lost
        self.seq += 1
        again = self.sim_pod(pod, victim.busy, step, victim.stream, run, victim.kind, victim.checkpoint_steps)
        self.pending[again.demand.key] = again
        for alive in self.replicas:
            if victim in alive:
                alive[alive.index(victim)] = again

    def settle(self, sim: SimPod, node: str | None, step: int) -> None:
        """The preemptor `sim` runs on `node` (None: it never will): the victims of its preemptions elsewhere
        died for nothing."""
        for at, where, count, lost in self.preempted_for.pop(sim.demand.key, ()):
            if where != node:
                self.meter.wasted_victims(at, count, lost)

    # autoscaling --------------------------------------------------------------------------------------------
    def provision(self, step: int) -> None:
        """Karpenter's provisioning for the pods still pending after the step's pass: each goes, in queue order, on
        a node already coming if one has room, else brings up the cheapest absent node that takes it (its group's
        node selector, affinity, taints and resources on an empty node), present `provisionMinutes` later."""
        assert self.scenario.autoscaling is not None
        delay = max(1, round(self.scenario.autoscaling.provision_minutes / self.scenario.step_minutes))
        planned: dict[str, dict[str, int]] = {n: {} for n in self.arriving}
        queue = sorted(self.pending.values(), key=lambda p: (-p.priority, p.created, p.seq))
        for sim in queue:
            requests = sim.demand.requests
            home = next(
                (n for n, used in planned.items() if self.placement.could_take(sim, n)
                 and fits(requests, self.records[n].allocatable, used)),
                None,
            )  # fmt: skip
            if home is None:
                home = next(
                    (n for n in self.by_price if n in self.placement.absent and n not in planned
                     and self.placement.could_take(sim, n) and fits(requests, self.records[n].allocatable, {})),
                    None,
                )  # fmt: skip
                if home is None:
                    continue
                planned[home] = {}
                self.arriving[home] = step + delay
            for resource, n in requests.items():
                planned[home][resource] = planned[home].get(resource, 0) + n

    def arrive_nodes(self, step: int) -> None:
        """The nodes provisioned earlier that are ready now take pods."""
        for name in [n for n, ready in self.arriving.items() if ready <= step]:
            del self.arriving[name]
            self.placement.absent.discard(name)
            self.empty_since[name] = step

    def remove_empty_nodes(self, step: int) -> None:
        """A present node empty for `emptyMinutes` goes (Karpenter's consolidation of empty nodes)."""
        threshold = self.scenario.empty_minutes / self.scenario.step_minutes
        for name in self.records:
            if name in self.placement.absent:
                continue
            if gpus_in_use(self.records[name], self.state.used(name, 0.0)) or self.state.bound_on(name)[0]:
                self.empty_since[name] = None
            elif self.empty_since.get(name) is None:
                self.empty_since[name] = step
            elif step - (self.empty_since[name] or step) >= threshold:
                self.placement.absent.add(name)
                self.empty_since[name] = None
        present = [n for n in self.records if n not in self.placement.absent]
        self.meter.present_now(step, len(present), sum(self.prices[n] for n in present))

    def run(self) -> DayResult:
        """Every step of the warm-up and the day; only the day is measured."""
        autoscaled = self.scenario.autoscaling is not None
        for step in range(self.scenario.warmup_steps + self.scenario.steps):
            if autoscaled:
                self.arrive_nodes(step)
            self.finish_jobs(step)
            self.scale_deployments(step)
            self.arrive_jobs(step)
            self.schedule(step)
            if autoscaled:
                self.provision(step)
            self.meter.record(step, self.state, self.work, self.pending.values())
            if autoscaled:
                self.remove_empty_nodes(step)
        for sim in list(self.pending.values()):  # preemptors still waiting at the end never got their node
            self.settle(sim, None, self.scenario.warmup_steps + self.scenario.steps)
        return self.meter.result(self.run_name)


def run_day(
    scenario: Scenario,
    run: Run,
    layouts: Mapping[str, NodeLayoutSpec] | None = None,
    preemption: Preemption = "verb",
) -> DayResult:
    """Simulate the scenario's day without gpupack (`none`) or under one extender scoring policy; deterministic
    given the scenario's seed. `layouts` gives MIG nodes other layouts than their groups' (`cluster_nodes`), the
    webhook sizing pods among the profiles the nodes then advertise; the run without gpupack has no MIG.
    `preemption` (`Preemption`): the runs with gpupack answer the preempt verb unless it says otherwise; the run
    without gpupack has no extender to ask."""
    if run == WITHOUT and preemption == "verb":
        preemption = "scheduler"
    return _Day(scenario, run, layouts, preemption).run()


def run_all(scenario: Scenario, runs: tuple[Run, ...] = RUNS) -> dict[str, DayResult]:
    """The day in each run (same seed, so the same arrivals, durations and utilizations)."""
    return {run: run_day(scenario, run) for run in runs}


def compare(scenario: Scenario, results: Mapping[str, DayResult] | None = None) -> dict[str, Any]:
    """The guide's numbers in each run (all three run now unless given), and gpupack's change against the cluster
    without gpupack and against spread."""
    return comparison(scenario, results if results is not None else run_all(scenario))
