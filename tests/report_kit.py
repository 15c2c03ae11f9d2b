"""A `Report` built by hand for the renderer tests: a small cluster with an idle, an underused, an ok, a hot and
an unmeasured node, findings of several kinds and severities, savings and a before/after.

The numbers are chosen so that the orders differ: by idle GPU-hours the underused T4 node comes before the
half-used H100 node and the idle single-T4 node before the hot H100 node; by idle cost (an H100 GPU-hour costs ten
T4 GPU-hours) both pairs swap. The mean over the GPUs is under 30 %, as the advice says.
"""

from __future__ import annotations

import math

from gpupack.core.thresholds import Thresholds
from gpupack.report.document import Comparison, Finding, NodeRow, Period, Report, Savings, Summary
from gpupack.report.usage import NodeUsage, Window

START = 1795392000.0
"""2026-11-23T00:00:00Z, a Monday."""
HOURS = 168
WINDOW = Window(START, START + HOURS * 3600)
HOSTILE_POD = "ml/<script>alert('x')</script>"
SOURCE = "Prometheus http://prometheus.monitoring:9090"
ADVICE = "Mean GPU utilization is under 30 %: do not add GPUs; share, schedule and scale down first."
PRICES = {"A100": 3.0, "H100": 5.0, "T4": 0.5}
"""Per GPU-hour, for the priced variant."""

# node, model, GPUs, mean %, p95 %, memory used fraction, spot
NODES: list[tuple[str, str, int, float | None, float | None, float | None, bool]] = [
    ("a100-idle-1", "A100", 8, 3.0, 9.0, 0.05, False),
    ("t4-under-1", "T4", 4, 18.0, 41.0, 0.62, False),
    ("h100-ok-1", "H100", 4, 55.0, 80.0, 0.70, False),
    ("h100-hot-1", "H100", 2, 93.0, 100.0, 0.91, True),
    ("t4-idle-2", "T4", 1, 1.0, 2.0, 0.01, False),
    ("t4-dark-3", "T4", 2, None, None, None, False),
]
ORDER_BY_GPU_HOURS = ["a100-idle-1", "t4-under-1", "h100-ok-1", "t4-idle-2", "h100-hot-1", "t4-dark-3"]
ORDER_BY_COST = ["a100-idle-1", "h100-ok-1", "t4-under-1", "h100-hot-1", "t4-idle-2", "t4-dark-3"]


def idle_hours(gpus: int, util: float) -> float:
    """gpus x hours x (1 - util/100), as the renderers count it."""
    return gpus * HOURS * (1 - util / 100)


def make_row(
    name: str,
    model: str,
    gpus: int,
    util: float | None,
    p95: float | None,
    fb: float | None,
    spot: bool,
    *,
    priced: bool = False,
) -> NodeRow:
    """One node's row, with its hourly curve and, when `priced`, its idle cost."""
    cost = idle_hours(gpus, util) * PRICES[model] if priced and util is not None else None
    usage = NodeUsage(name, f"NVIDIA {model}", gpus, util, p95, fb, hourly=hourly_curve(util))
    return NodeRow(usage, Thresholds().node_class(util), spot=spot, idle_cost=cost)


def hourly_curve(util: float | None) -> tuple[float | None, ...]:
    """A day-shaped curve around `util`, with a gap of six hours on day three (no data is not zero)."""
    if util is None:
        return (None,) * HOURS
    values: list[float | None] = []
    for hour in range(HOURS):
        swing = min(util, 100 - util) * math.sin(2 * math.pi * (hour % 24 - 8) / 24)
        values.append(None if 60 <= hour < 66 else round(max(0.0, min(100.0, util + swing)), 1))
    return tuple(values)


def make_findings(pod: str = HOSTILE_POD) -> tuple[Finding, ...]:
    """Findings whose sorted order is: both idle-node (high, more money first), oversized-workload (medium, more
    money than memory-held-idle although its kind sorts after), memory-held-idle, hot-node (low), info."""
    return (
        Finding(
            "hot-node",
            "low",
            "Add capacity or move batch pods off this node.",
            node="h100-hot-1",
            evidence={"util_p95": 100.0},
        ),
        Finding(
            "memory-held-idle",
            "medium",
            "Set gpupack.io/workload: inference on the Deployment.",
            node="t4-under-1",
            gpu="0",
            pod=pod,
            workload="Deployment ml/chat",
            evidence={"held_fraction": 0.8, "idle_gpu_hours": 100.0, "cost": 50.0},
        ),
        Finding(
            "idle-node",
            "high",
            "Drain t4-idle-2; Cluster Autoscaler removes it.",
            node="t4-idle-2",
            evidence={"util_mean": 1.0, "idle_gpu_hours": 166.32, "cost": 83.16},
        ),
        Finding(
            "oversized-workload",
            "medium",
            "Give ml/embedder a MIG slice: gpupack.io/gpu-memory: 10Gi.",
            pod="ml/embedder-7f9c",
            workload="Deployment ml/embedder",
            evidence={"util_mean": 12.0, "idle_gpu_hours": 150.0, "cost": 450.0},
        ),
        Finding(
            "idle-node",
            "high",
            "Drain a100-idle-1; Cluster Autoscaler removes it.",
            node="a100-idle-1",
            evidence={"util_mean": 3.0, "idle_gpu_hours": 1303.68, "cost": 3911.04},
        ),
        Finding("no-gpu-metrics", "info", "Check the DCGM exporter on t4-dark-3.", node="t4-dark-3"),
    )


def make_comparison() -> Comparison:
    """Two weeks, the second after gpupack: fewer GPU-hours per unit of work."""
    before = Period(Window(START - 14 * 86400, START - 7 * 86400), 21.0, 30.5, 6.0, 5124.0, 1076.0)
    after = Period(Window(START - 7 * 86400, START), 34.0, 19.25, 4.0, 3234.0, 1099.6)
    return Comparison(before, after, "busy GPU-hour", True, "GPU-hours per busy GPU-hour fell from 4.76 to 2.94.")


def make_report(*, priced: bool = False, pod: str = HOSTILE_POD) -> Report:
    """The whole report; tests drop parts with `dataclasses.replace`."""
    rows = tuple(make_row(*node, priced=priced) for node in NODES)
    known = [(n[2], n[3]) for n in NODES if n[3] is not None]
    idle = sum(idle_hours(g, u) for g, u in known)
    cost = sum(r.idle_cost or 0.0 for r in rows) if priced else None
    summary = Summary(
        gpu_util_mean=sum(g * u for g, u in known) / sum(g for g, _ in known),
        gpus=sum(n[2] for n in NODES),
        gpu_nodes=len(NODES),
        nodes_idle=2,
        nodes_underused=3,
        nodes_hot=1,
        idle_gpu_hours=idle,
        idle_cost=cost,
        currency="USD" if priced else None,
        advice=ADVICE,
    )
    savings = Savings(
        6,
        3,
        ("a100-idle-1", "t4-idle-2", "t4-under-1"),
        13 * HOURS,
        13 * HOURS * 1.9 if priced else None,
        unplaced=("ml/huge-train-0",),
        util_after=61.5,
        overloaded=("t4-busy-1",),
        unmeasured_pods=2,
    )
    return Report(
        window=WINDOW,
        source=SOURCE,
        metric="gpu-util",
        summary=summary,
        nodes=rows,
        findings=make_findings(pod),
        hourly={row.usage.node: row.usage.hourly for row in rows},
        savings=savings,
        compare=make_comparison(),
    )
