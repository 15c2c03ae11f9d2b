"""What the synthetic day measures, with the guide's (docs/method.md) definitions, and the before/after comparison.

Per measured step (its state after scheduling holds for the whole step):
- GPUs in use: `gpupack.placement.accounting.gpus_in_use` per node, the device plugin's packing of the requested
  resources;
- busy GPUs: sum over bound pods of utilization x GPUs' worth held (a MIG slice is its share of its GPU's memory
  slices, `gpupack.core.gpus.catalog.memory_share`; a time-sliced replica 1 / replicas), so mean utilization of
  the GPUs in use = busy / in use, time-weighted;
- GPU nodes needed: nodes with any GPU requested;
- pending pods: created but not bound after the step's scheduling.
A node empty (no GPU requested) for `emptyMinutes` in a row is what Cluster Autoscaler removes with
`--scale-down-unneeded-time`: each such stretch is a scale-down, and the time past the threshold is removable
node-hours. Emptiness is tracked through the warm-up, so a node empty since then is removable from the start.
Billed GPU-hours are the cluster's GPUs x the day minus the GPUs of removable nodes x their removable time: the
bill once the autoscaler acts (a node is paid for whole, however few of its GPUs are in use), assuming a removed
node comes back as soon as it is needed.
The meter is the same in every run, the one without gpupack included: there a pod holds whole GPUs, so a GPU held
by an inference replica 20 % busy counts 0.2 busy GPU, and a pod that fits nowhere counts its pending minutes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpupack.core.contract import RESOURCE_MIG_PREFIX as MIG_PREFIX
from gpupack.extender.demand import PodDemand
from gpupack.extender.inventory import NodeRecord
from gpupack.extender.state import ClusterState
from gpupack.placement.accounting import gpus_in_use
from gpupack.simulator.day.scenario import Scenario


@dataclass(slots=True, eq=False)
class SimPod:
    """A created pod: the object as stored (after the webhook, if any), its demand, and where and how it runs."""

    pod: dict[str, Any]
    demand: PodDemand
    priority: int
    busy: float
    """Mean utilization of what it holds, 0-1."""
    created: int
    seq: int
    stream: str = ""
    constraints: bytes = b""
    """Affinity, node selector and tolerations serialised: pods equal here pass the same static filters."""
    run_steps: int | None = None
    """Steps a job runs once bound (None: a Deployment replica, deleted by scaling)."""
    kind: str = ""
    """The class the scenario gave it (inference, training, batch): the same in every run, whether or not a
    webhook annotated the pod with it."""
    checkpoint_steps: int | None = None
    """Steps between a job's checkpoints (None: it does not checkpoint, or is no job)."""
    node: str | None = None
    started: int = 0
    """The step it was bound (kube-scheduler's preemption spares the older of two equals)."""
    gpus_held: float = 0.0
    """GPUs' worth it holds where it is bound (a MIG slice its share, a time-sliced replica 1 / replicas)."""
    gpu_work: float = 0.0
    """GPUs' worth of work it does where it is bound."""


@dataclass(frozen=True, slots=True)
class EmptyStretch:
    """A node empty long enough for Cluster Autoscaler to remove it, clipped to the measured day."""

    node: str
    start_hour: float
    end_hour: float
    removable_hours: float
    gpus: int
    """GPUs of the node: what its removal saves per hour."""


@dataclass(frozen=True)
class DayResult:
    """One run's day: timelines per measured step and the stretches of removable empty nodes."""

    scenario: str
    run: str
    """`none` (without gpupack), else the extender's scoring policy."""
    step_minutes: float
    nodes: int
    gpus: int
    hours: tuple[float, ...]
    gpus_in_use: tuple[int, ...]
    busy_gpus: tuple[float, ...]
    gpu_nodes: tuple[int, ...]
    spot_gpus_in_use: tuple[int, ...]
    pending: tuple[int, ...]
    empty_stretches: tuple[EmptyStretch, ...]
    mig_nodes: tuple[int, ...] = ()
    """MIG nodes with a GPU in use, per step: the part of `gpu_nodes` a MIG layout decides."""
    pending_minutes_by_class: Mapping[str, float] = field(default_factory=dict)
    pods_created: int = 0
    pods_denied: int = 0
    preemption: Mapping[str, Any] = field(default_factory=dict)
    """What preemption cost in the day (`Meter.preemption_summary`)."""
    present_nodes: tuple[int, ...] = ()
    """With the scenario's `autoscaling`: the nodes that exist at each measured step (in use or not yet gone)."""
    present_cost: tuple[float, ...] = ()
    """Their price per hour at each measured step."""

    @property
    def mean_utilization(self) -> float:
        """Time-weighted mean utilization of the GPUs in use (0-1)."""
        in_use = sum(self.gpus_in_use)
        return sum(self.busy_gpus) / in_use if in_use else 0.0

    def utilization_curve(self) -> list[float]:
        """Mean utilization of the GPUs in use at each step (0 when none is in use)."""
        return [b / g if g else 0.0 for b, g in zip(self.busy_gpus, self.gpus_in_use, strict=True)]

    def _hours_of(self, values: Iterable[float]) -> float:
        return sum(values) * self.step_minutes / 60

    def summary(self) -> dict[str, Any]:
        """The guide's numbers, rounded for people and JSON. `node_hours` are the GPU nodes paid for: with the
        scenario's `autoscaling`, the nodes that existed; without, every node but its removable empty stretches."""
        day_hours = len(self.hours) * self.step_minutes / 60
        removable = sum(s.removable_hours for s in self.empty_stretches)
        removable_gpu_hours = sum(s.removable_hours * s.gpus for s in self.empty_stretches)
        hour = self.step_minutes / 60
        autoscaled = {
            "node_hours": round(sum(self.present_nodes) * hour, 2),
            "nodes_peak": max(self.present_nodes, default=0),
            "cost": round(sum(self.present_cost) * hour, 2),
        }
        fixed = {"node_hours": round(self.nodes * day_hours - removable, 2)}
        return {
            **(autoscaled if self.present_nodes else fixed),
            "mean_utilization_pct": round(100 * self.mean_utilization, 1),
            "gpu_hours": round(self._hours_of(self.gpus_in_use), 1),
            "busy_gpu_hours": round(self._hours_of(self.busy_gpus), 1),
            "spot_gpu_hours": round(self._hours_of(self.spot_gpus_in_use), 1),
            "billed_gpu_hours": round(self.gpus * day_hours - removable_gpu_hours, 1),
            "peak_gpus_in_use": max(self.gpus_in_use, default=0),
            "gpu_nodes_peak": max(self.gpu_nodes, default=0),
            "gpu_nodes_mean": round(sum(self.gpu_nodes) / max(len(self.gpu_nodes), 1), 2),
            "mig_nodes_peak": max(self.mig_nodes, default=0),
            "mig_nodes_mean": round(sum(self.mig_nodes) / max(len(self.mig_nodes), 1), 2),
            "removable_nodes": len({s.node for s in self.empty_stretches}),
            "scale_downs": len(self.empty_stretches),
            "removable_node_hours": round(removable, 1),
            "removable_nodes_mean": round(removable / day_hours, 2) if day_hours else 0.0,
            "pending_pod_minutes": round(sum(self.pending_minutes_by_class.values()), 1),
            "pending_pod_minutes_by_class": {k: round(v, 1) for k, v in sorted(self.pending_minutes_by_class.items())},
            "pods_created": self.pods_created,
            "pods_denied": self.pods_denied,
            "pending_at_end": self.pending[-1] if self.pending else 0,
            **self.preemption,
            "nodes": self.nodes,
            "gpus": self.gpus,
        }


class Meter:
    """Records a run step by step and builds its DayResult."""

    def __init__(self, scenario: Scenario, records: Mapping[str, NodeRecord]) -> None:
        self.scenario = scenario
        self.records = records
        self.warmup = scenario.warmup_steps
        self.dt = scenario.step_minutes
        self.threshold = scenario.empty_minutes / scenario.step_minutes
        self.empty_since: dict[str, int | None] = dict.fromkeys(records)
        self.stretches: list[EmptyStretch] = []
        self.hours: list[float] = []
        self.in_use: list[int] = []
        self.busy: list[float] = []
        self.nodes: list[int] = []
        self.mig: list[int] = []
        self.spot: list[int] = []
        self.pending: list[int] = []
        self.present: list[int] = []
        self.present_cost: list[float] = []
        self.pending_minutes: dict[str, float] = {}
        self.created = 0
        self.denied = 0
        self.preemptions = 0
        self.victims: dict[str, int] = {}
        self.lost: dict[str, float] = {}
        self.wasted = 0
        self.wasted_lost = 0.0

    def preempted(self, step: int, victims: Iterable[tuple[str, float]]) -> None:
        """One preemption at `step`: each victim's class and the GPU-hours of its work lost (measured steps only)."""
        if step < self.warmup:
            return
        self.preemptions += 1
        for cls, lost in victims:
            self.victims[cls] = self.victims.get(cls, 0) + 1
            self.lost[cls] = self.lost.get(cls, 0.0) + lost

    def wasted_victims(self, step: int, count: int, lost: float) -> None:
        """Victims of a preemption at `step` that made room on a node the preemptor never ran on."""
        if step >= self.warmup:
            self.wasted += count
            self.wasted_lost += lost

    def preemption_summary(self) -> dict[str, Any]:
        """Preemptions, victims (by class), victims killed for nothing, and GPU-hours of work lost, rounded."""
        return {
            "preemptions": self.preemptions,
            "victims": sum(self.victims.values()),
            "victims_by_class": dict(sorted(self.victims.items())),
            "wasted_victims": self.wasted,
            "gpu_hours_lost": round(sum(self.lost.values()), 1),
            "gpu_hours_lost_by_class": {k: round(v, 1) for k, v in sorted(self.lost.items())},
            "wasted_gpu_hours_lost": round(self.wasted_lost, 1),
        }

    def record(self, step: int, state: ClusterState, work: Mapping[str, float], pending: Iterable[SimPod]) -> None:
        """The state after the step's scheduling (emptiness always; the rest only on measured steps)."""
        in_use = nodes = mig = spot = 0
        for name, record in self.records.items():
            gpus = gpus_in_use(record, state.used(name, 0.0))
            self._track_empty(name, step, gpus == 0)
            in_use += gpus
            nodes += gpus > 0
            mig += gpus > 0 and any(r.startswith(MIG_PREFIX) for r in record.shares)
            spot += gpus if record.spot else 0
        if step < self.warmup:
            return
        waiting = list(pending)
        for sim in waiting:
            cls = sim.kind or "other"
            self.pending_minutes[cls] = self.pending_minutes.get(cls, 0.0) + self.dt
        self.hours.append((step - self.warmup) * self.dt / 60)
        self.in_use.append(in_use)
        self.busy.append(sum(work.values()))
        self.nodes.append(nodes)
        self.mig.append(mig)
        self.spot.append(spot)
        self.pending.append(len(waiting))

    def present_now(self, step: int, nodes: int, cost_per_hour: float) -> None:
        """With autoscaling: the nodes that exist after the step, and what they cost an hour (measured steps only)."""
        if step >= self.warmup:
            self.present.append(nodes)
            self.present_cost.append(cost_per_hour)

    def _track_empty(self, name: str, step: int, empty: bool) -> None:
        since = self.empty_since[name]
        if empty and since is None:
            self.empty_since[name] = step
        elif not empty and since is not None:
            self._close(name, since, step)
            self.empty_since[name] = None

    def _close(self, name: str, start: int, end: int) -> None:
        """An empty stretch [start, end) in steps: its part past the threshold inside the day is removable."""
        day_end = self.warmup + self.scenario.steps
        removable_from = max(start + self.threshold, self.warmup)
        until = min(end, day_end)
        if until - removable_from <= 1e-9:
            return
        hour = self.dt / 60
        self.stretches.append(
            EmptyStretch(
                name,
                (max(start, self.warmup) - self.warmup) * hour,
                (until - self.warmup) * hour,
                (until - removable_from) * hour,
                self.records[name].gpu_count,
            )
        )

    def result(self, run: str) -> DayResult:
        """Close the stretches still open at the end of the day and freeze the timelines."""
        for name, since in self.empty_since.items():
            if since is not None:
                self._close(name, since, self.warmup + self.scenario.steps)
        return DayResult(
            scenario=self.scenario.name,
            run=run,
            step_minutes=self.dt,
            nodes=len(self.records),
            gpus=sum(r.gpu_count for r in self.records.values()),
            hours=tuple(self.hours),
            gpus_in_use=tuple(self.in_use),
            busy_gpus=tuple(self.busy),
            gpu_nodes=tuple(self.nodes),
            spot_gpus_in_use=tuple(self.spot),
            pending=tuple(self.pending),
            empty_stretches=tuple(self.stretches),
            mig_nodes=tuple(self.mig),
            pending_minutes_by_class=dict(self.pending_minutes),
            pods_created=self.created,
            pods_denied=self.denied,
            preemption=self.preemption_summary(),
            present_nodes=tuple(self.present),
            present_cost=tuple(self.present_cost),
        )


WITHOUT: Final = "none"
"""The key of the run without gpupack (in `DayResult.run`, the JSON's `policies` and `gpupack_vs_none`)."""
LABELS = {WITHOUT: "without gpupack"}
"""How people see a run's key (the others are named by their scoring policy)."""
CHANGES = (
    "mean_utilization_pct",
    "gpu_hours",
    "busy_gpu_hours",
    "billed_gpu_hours",
    "gpu_nodes_peak",
    "gpu_nodes_mean",
    "removable_node_hours",
    "pending_pod_minutes",
)


def label(run: str) -> str:
    """The name of a run for people: `without gpupack`, `spread`, `gpupack`."""
    return LABELS.get(run, run)


def _change(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """`after` minus `before` for each of CHANGES, and the share of `before`'s GPU-hours that `after` saves."""
    out: dict[str, Any] = {key: round(after[key] - before[key], 2) for key in CHANGES}
    if before["gpu_hours"]:
        out["gpu_hours_saved_pct"] = round(100 * (before["gpu_hours"] - after["gpu_hours"]) / before["gpu_hours"], 1)
    if "cost" in before and before["node_hours"]:  # autoscaled: the nodes that existed are what was paid for
        saved = before["node_hours"] - after["node_hours"]
        out["node_hours_saved_pct"] = round(100 * saved / before["node_hours"], 1)
    return out


def comparison(scenario: Scenario, results: Mapping[str, DayResult]) -> dict[str, Any]:
    """Each run's summary, and gpupack's change against the cluster without gpupack (the guide's before/after)
    and against spread (placement alone), for the runs given."""
    out: dict[str, Any] = {
        "scenario": scenario.name,
        "scale": scenario.scale,
        "hours": scenario.hours,
        "step_minutes": scenario.step_minutes,
        "seed": scenario.seed,
        "policies": {name: result.summary() for name, result in results.items()},
    }
    for before in (WITHOUT, "spread"):
        if before in results and "gpupack" in results:
            out[f"gpupack_vs_{before}"] = _change(out["policies"][before], out["policies"]["gpupack"])
    return out


ROWS = (
    ("mean utilization of GPUs in use", "mean_utilization_pct", "{:.1f}%"),
    ("GPU-hours (GPUs in use x time)", "gpu_hours", "{:.1f}"),
    ("  of which on spot nodes", "spot_gpu_hours", "{:.1f}"),
    ("busy GPU-hours (work done)", "busy_gpu_hours", "{:.1f}"),
    ("GPU-hours billed, autoscaler on", "billed_gpu_hours", "{:.1f}"),
    ("GPUs in use at peak", "peak_gpus_in_use", "{}"),
    ("GPU nodes needed at peak", "gpu_nodes_peak", "{}"),
    ("GPU nodes needed on average", "gpu_nodes_mean", "{:.2f}"),
    ("nodes empty >= threshold (count)", "removable_nodes", "{}"),
    ("  scale-downs (empty stretches)", "scale_downs", "{}"),
    ("  removable node-hours", "removable_node_hours", "{:.1f}"),
    ("  removable nodes on average", "removable_nodes_mean", "{:.2f}"),
    ("pending pod-minutes", "pending_pod_minutes", "{:.0f}"),
    ("  pods still pending at the end", "pending_at_end", "{}"),
    ("pods preempted (victims)", "victims", "{}"),
    ("  killed for nothing", "wasted_victims", "{}"),
    ("  GPU-hours of their work lost", "gpu_hours_lost", "{:.1f}"),
    ("pods created", "pods_created", "{}"),
    ("pods refused by the webhook", "pods_denied", "{}"),
)


AUTOSCALED_ROWS = (
    ("GPU node-hours (nodes that existed)", "node_hours", "{:.1f}"),
    ("GPU nodes at peak (existing)", "nodes_peak", "{}"),
    ("cost of the GPU nodes, USD", "cost", "{:,.0f}"),
)
"""With the scenario's `autoscaling`, in place of the billed and removable rows: nodes exist only while the
autoscaler keeps them, so what is paid for is counted directly, not as the fixed cluster less its empty stretches."""
NOT_AUTOSCALED = {
    "billed_gpu_hours",
    "removable_nodes",
    "scale_downs",
    "removable_node_hours",
    "removable_nodes_mean",
}


def rows(autoscaled: bool) -> tuple[tuple[str, str, str], ...]:
    """The table's rows: with autoscaling, what existed and cost, without the fixed cluster's removable rows."""
    if not autoscaled:
        return ROWS
    kept = [r for r in ROWS if r[1] not in NOT_AUTOSCALED]
    at = next(i for i, r in enumerate(kept) if r[1] == "peak_gpus_in_use")
    return (*kept[:at], *AUTOSCALED_ROWS, *kept[at:])


COLUMN = 17
"""Characters per run column: `without gpupack` and its numbers, right-aligned."""
_OF = {WITHOUT: "the cluster without gpupack", "spread": "spread"}


def table(data: Mapping[str, Any]) -> str:
    """The comparison as a fixed-width table, one column per run."""
    policies: Mapping[str, Mapping[str, Any]] = data["policies"]
    names = list(policies)
    first = next(iter(policies.values()))
    lines = [
        f"scenario {data['scenario']} (scale {data['scale']}, {data['hours']:g} h in {data['step_minutes']:g}-minute "
        f"steps, seed {data['seed']}): {first['nodes']} GPU nodes, {first['gpus']} GPUs",
        f"{'':<36}" + "".join(f"{label(n):>{COLUMN}}" for n in names),
    ]
    for text, key, fmt in rows("cost" in first):
        lines.append(f"{text:<36}" + "".join(f"{fmt.format(policies[n][key]):>{COLUMN}}" for n in names))
    for before in (WITHOUT, "spread"):
        change = data.get(f"gpupack_vs_{before}")
        if change and "gpu_hours_saved_pct" in change:
            lines.append(saving(change["gpu_hours_saved_pct"], before, policies[before]))
        if change and "node_hours_saved_pct" in change:
            lines.append(f"gpupack needs {change['node_hours_saved_pct']:.1f}% fewer GPU node-hours than {_OF[before]}")
    return "\n".join(lines)


def saving(saved_pct: float, before: str, summary: Mapping[str, Any]) -> str:
    """gpupack's GPU-hours against run `before`'s, in words. A run that left pods pending at the end of the day
    did not hold GPUs for them: its GPU-hours are less work, and the sentence says so instead of leaving a
    negative saving to read as gpupack costing more for the same day."""
    if saved_pct >= 0:
        line = f"gpupack saves {saved_pct:.1f}% of the GPU-hours of {_OF[before]}"
    else:
        line = f"gpupack uses {-saved_pct:.1f}% more GPU-hours than {_OF[before]}"
    if summary["pending_at_end"]:
        line += (
            f", where {summary['pending_at_end']} pods were still pending at the end of the day"
            f" ({summary['pending_pod_minutes']:,.0f} pending pod-minutes)"
        )
    return line
