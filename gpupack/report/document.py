"""The report as data: findings, the per-node table, the summary in the guide's (docs/method.md) terms, savings and the
before/after comparison. Renderers (terminal, JSON, HTML) only format this; nothing here queries anything.

Every finding has a stable `kind` (admins grep for it and alert on it), a `severity`, what it concerns (node, GPU,
pod, workload: whichever apply), its evidence as numbers, and the action to take in words a person can follow: a
label to add, a command to run, a policy field to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from gpupack.core.thresholds import NodeClass, Thresholds
from gpupack.report.usage import NodeUsage, Window

Severity = Literal["high", "medium", "low", "info"]
Evidence = Mapping[str, float | int | str | None]

SEVERITY_ORDER: Mapping[str, int] = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the admin should know, with the evidence and the action."""

    kind: str
    severity: Severity
    action: str
    node: str | None = None
    gpu: str | None = None
    pod: str | None = None
    """`namespace/name`."""
    workload: str | None = None
    """`Kind namespace/name` of the controller that owns the pod (a ReplicaSet resolved to its Deployment)."""
    evidence: Evidence = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The `findings[]` item of `--json`."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "node": self.node,
            "gpu": self.gpu,
            "pod": self.pod,
            "workload": self.workload,
            "evidence": dict(self.evidence),
            "action": self.action,
        }


def sort_findings(findings: Sequence[Finding]) -> list[Finding]:
    """Most severe first, then by kind and what it concerns (a stable order for people and for diffs)."""
    return sorted(
        findings,
        key=lambda f: (SEVERITY_ORDER[f.severity], f.kind, f.node or "", f.gpu or "", f.workload or "", f.pod or ""),
    )


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the table: its usage and its class."""

    usage: NodeUsage
    node_class: NodeClass
    spot: bool = False
    idle_cost: float | None = None
    """The price of this node's idle GPU-hours over the window, when prices were given (the renderers sort the
    table by it); None otherwise."""

    def as_json(self) -> dict[str, Any]:
        """The `nodes[]` item of `--json` (utilization in percent)."""
        u = self.usage
        return {
            "node": u.node,
            "model": u.model,
            "gpus": u.gpus,
            "util_mean": _round(u.util_mean),
            "util_p95": _round(u.util_p95),
            "fb_used_fraction": _round(u.fb_used_fraction, 3),
            "class": self.node_class,
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """The guide's numbers for the window."""

    gpu_util_mean: float | None
    """Mean utilization over every GPU seen, percent."""
    gpus: int
    gpu_nodes: int
    nodes_idle: int
    nodes_underused: int
    """Nodes under the underused threshold, the idle ones included (the guide: "nodes under 30 %")."""
    nodes_hot: int
    idle_gpu_hours: float
    """GPU-hours of capacity not used: each GPU's hours times (1 - its utilization)."""
    idle_cost: float | None
    """Their price, when prices were given; None otherwise (no price is invented)."""
    currency: str | None = None
    prices_note: str | None = None
    """The prices file's `note` (`example prices, not quotes`), shown beside the money."""
    advice: str = ""
    """What the guide says to do first, in one sentence."""

    def as_json(self) -> dict[str, Any]:
        """The `summary` object of `--json`."""
        return {
            "gpu_util_mean": _round(self.gpu_util_mean),
            "gpus": self.gpus,
            "gpu_nodes": self.gpu_nodes,
            "nodes_idle": self.nodes_idle,
            "nodes_underused": self.nodes_underused,
            "nodes_hot": self.nodes_hot,
            "idle_gpu_hours": round(self.idle_gpu_hours, 1),
            "idle_cost": None if self.idle_cost is None else round(self.idle_cost, 2),
            "currency": self.currency,
            "prices_note": self.prices_note,
            "advice": self.advice,
        }


@dataclass(frozen=True, slots=True)
class Savings:
    """What gpupack would change: the running pods replayed through its admission and placement."""

    gpu_nodes_now: int
    gpu_nodes_needed: int
    removable: tuple[str, ...]
    """Nodes left empty by the replay, which Cluster Autoscaler could then remove."""
    removable_gpu_hours: float
    """Their GPUs times the window's hours."""
    removable_cost: float | None
    unplaced: tuple[str, ...] = ()
    """Pods the replay could not place (they would wait for capacity)."""
    util_after: float | None = None
    """Mean utilization of the GPUs the replayed pods hold, percent: each pod's measured work where it lands (an
    overloaded node's GPUs count as fully busy)."""
    overloaded: tuple[str, ...] = ()
    """Nodes the replay gives more work than their GPUs can do: the saving there is not real."""
    unmeasured_pods: int = 0
    """Replayed pods whose work the window does not say (counted as none in `util_after`)."""

    def as_json(self) -> dict[str, Any]:
        """The `savings` object of `--json`."""
        return {
            "gpu_nodes_now": self.gpu_nodes_now,
            "gpu_nodes_needed": self.gpu_nodes_needed,
            "removable": list(self.removable),
            "removable_gpu_hours": round(self.removable_gpu_hours, 1),
            "removable_cost": None if self.removable_cost is None else round(self.removable_cost, 2),
            "unplaced": list(self.unplaced),
            "util_after": _round(self.util_after),
            "overloaded": list(self.overloaded),
            "unmeasured_pods": self.unmeasured_pods,
        }


@dataclass(frozen=True, slots=True)
class Period:
    """One side of a before/after comparison."""

    window: Window
    gpu_util_mean: float | None
    """Mean utilization of the GPUs in use (utilization above zero), percent."""
    gpus_in_use: float
    gpu_nodes_in_use: float
    gpu_hours: float
    work: float | None
    """Units of work done: busy GPU-hours by default, or the `--work-query` metric's total."""

    @property
    def gpu_hours_per_work(self) -> float | None:
        """GPU-hours per unit of work (lower is better)."""
        return self.gpu_hours / self.work if self.work else None

    def as_json(self) -> dict[str, Any]:
        """One side of `compare`."""
        return {
            "window": window_json(self.window),
            "gpu_util_mean": _round(self.gpu_util_mean),
            "gpus_in_use": round(self.gpus_in_use, 2),
            "gpu_nodes_in_use": round(self.gpu_nodes_in_use, 2),
            "gpu_hours": round(self.gpu_hours, 1),
            "work": None if self.work is None else round(self.work, 3),
            "gpu_hours_per_work": _round(self.gpu_hours_per_work, 4),
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """`--before A..B --after C..D`: the guide's two numbers on each side, and whether the change worked."""

    before: Period
    after: Period
    work_unit: str
    effective: bool
    verdict: str

    def as_json(self) -> dict[str, Any]:
        """The `compare` object of `--json`."""
        return {
            "before": self.before.as_json(),
            "after": self.after.as_json(),
            "work_unit": self.work_unit,
            "effective": self.effective,
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """Everything the renderers show."""

    window: Window
    source: str
    metric: str
    summary: Summary
    nodes: tuple[NodeRow, ...]
    findings: tuple[Finding, ...]
    hourly: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    """Per node, the mean utilization of each hour of the window (the HTML heatmap)."""
    savings: Savings | None = None
    compare: Comparison | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)

    def as_json(self) -> dict[str, Any]:
        """The whole `--json` document (the docs site: Measure and verify, the JSON document)."""
        return {
            "window": window_json(self.window),
            "source": self.source,
            "metric": self.metric,
            "summary": self.summary.as_json(),
            "nodes": [row.as_json() for row in self.nodes],
            "findings": [f.as_json() for f in self.findings],
            "savings": None if self.savings is None else self.savings.as_json(),
            "compare": None if self.compare is None else self.compare.as_json(),
        }


def iso(seconds: float) -> str:
    """An instant as RFC 3339 in UTC, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_json(window: Window) -> dict[str, str]:
    """`{"start", "end"}` in RFC 3339."""
    return {"start": iso(window.start), "end": iso(window.end)}


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
