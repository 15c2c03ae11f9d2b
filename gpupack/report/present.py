"""What the terminal and the HTML page both show, decided once: the order of nodes and findings (most money or
GPU-hours first, so the top of each table is what to fix first), the words of each row and how numbers read.
The renderers only lay these out, so the two outputs cannot disagree."""

from __future__ import annotations

from collections.abc import Sequence

from gpupack.report.document import (
    SEVERITY_ORDER,
    Comparison,
    Evidence,
    Finding,
    NodeRow,
    Report,
    Savings,
    iso,
    sort_findings,
)
from gpupack.report.usage import Window

CLASS_COLOURS = {
    "idle": "#c0392b",
    "underused": "#b9770e",
    "ok": "#1e8449",
    "hot": "#7d3c98",
    "unknown": "#707b7c",
}
"""One palette for the terminal (rich takes hex), the page and the distribution chart. Idle is red because it is
the money lost; the class word is always printed beside the colour."""

SEVERITY_COLOURS = {"high": "#c0392b", "medium": "#b9770e", "low": "#2874a6", "info": "#707b7c"}

NONE = "-"
"""What a number the source did not have reads as (never a made-up zero)."""


def node_idle_gpu_hours(row: NodeRow, hours: float) -> float | None:
    """gpus x hours x (1 - utilization/100): the node's GPU capacity paid for and not used over the window, the
    summary's idle GPU-hours for one node. None when its utilization is unknown."""
    return row.usage.idle_gpu_hours(hours)


def priced(report: Report) -> bool:
    """Whether prices were given: then cost, not GPU-hours, orders the nodes and a cost column is shown."""
    return report.summary.idle_cost is not None or any(row.idle_cost is not None for row in report.nodes)


def nodes_by_waste(report: Report) -> list[NodeRow]:
    """Most idle cost first when prices exist, else most idle GPU-hours; nodes without a number last; then by
    name, so equal nodes keep one order."""
    by_cost = priced(report)

    def key(row: NodeRow) -> tuple[bool, float, str]:
        value = row.idle_cost if by_cost else node_idle_gpu_hours(row, report.window.hours)
        return (value is None, -(value or 0.0), row.usage.node)

    return sorted(report.nodes, key=key)


def evidence_number(evidence: Evidence, key: str) -> float | None:
    """A numeric evidence value, None when absent or not a number."""
    value = evidence.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def findings_by_weight(findings: Sequence[Finding]) -> list[Finding]:
    """Most severe first; within a severity the most money (`cost`), then the most `idle_gpu_hours` in the
    evidence; then `sort_findings`' stable order (Python's sort keeps it for ties)."""

    def key(f: Finding) -> tuple[int, float, float]:
        cost = evidence_number(f.evidence, "cost") or 0.0
        hours = evidence_number(f.evidence, "idle_gpu_hours") or 0.0
        return (SEVERITY_ORDER[f.severity], -cost, -hours)

    return sorted(sort_findings(findings), key=key)


def number(value: float | None, digits: int = 1) -> str:
    """A number with thousands separators, or `-`."""
    return NONE if value is None else f"{value:,.{digits}f}"


def percent(value: float | None) -> str:
    """A percent (0-100) as `23.4 %`."""
    return NONE if value is None else f"{value:.1f} %"


def money(value: float | None, currency: str | None) -> str:
    """A price as `USD 1,234.56` (the currency as the prices named it)."""
    if value is None:
        return NONE
    return f"{currency} {value:,.2f}" if currency else f"{value:,.2f}"


def window_text(window: Window) -> str:
    """`START .. END (N h)` in UTC."""
    return f"{iso(window.start)} .. {iso(window.end)} ({window.hours:,.4g} h)"


def evidence_items(evidence: Evidence) -> list[str]:
    """The evidence as `key=value` words, in the finding's own order."""
    return [f"{key}={_value(value)}" for key, value in evidence.items()]


def _value(value: float | int | str | None) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def concerns(f: Finding) -> list[str]:
    """What a finding is about, as `node X`, `GPU 0`, `pod ns/name`, `workload Kind ns/name` (those set)."""
    parts = (("node", f.node), ("GPU", f.gpu), ("pod", f.pod), ("workload", f.workload))
    return [f"{label} {value}" for label, value in parts if value]


def summary_rows(report: Report) -> list[tuple[str, str]]:
    """The summary in the guide's (docs/method.md) terms, as (label, value)."""
    s, t = report.summary, report.thresholds
    idle = number(s.idle_gpu_hours)
    if s.idle_cost is not None:
        idle += f" ({money(s.idle_cost, s.currency)})"
    return [
        ("window", window_text(report.window)),
        ("source", report.source),
        ("metric", report.metric),
        ("mean GPU utilization", percent(s.gpu_util_mean)),
        ("GPUs", f"{s.gpus:,}"),
        ("GPU nodes", f"{s.gpu_nodes:,}"),
        (f"nodes idle (under {t.idle:g} %)", f"{s.nodes_idle:,}"),
        (f"nodes under {t.underused:g} % (idle included)", f"{s.nodes_underused:,}"),
        (f"nodes hot (over {t.hot:g} %)", f"{s.nodes_hot:,}"),
        ("idle GPU-hours", idle),
        *([("prices", f"{s.currency} per GPU-hour: {s.prices_note}")] if s.prices_note and s.currency else []),
    ]


NUMERIC_HEADERS = frozenset({"GPUs", "mean %", "p95 %", "memory used %", "idle GPU-h", "idle cost"})
"""The nodes table's columns that hold numbers: right-aligned in both renderers."""


def node_headers(report: Report) -> list[str]:
    """The nodes table's columns (idle cost only when priced); `node_cells` fills them in this order."""
    headers = ["node", "model", "GPUs", "mean %", "p95 %", "memory used %", "class", "idle GPU-h"]
    return [*headers, "idle cost"] if priced(report) else headers


def node_cells(report: Report, row: NodeRow) -> list[str]:
    """One node's cells, in `node_headers` order."""
    u = row.usage
    memory = None if u.fb_used_fraction is None else 100.0 * u.fb_used_fraction
    cells = [
        u.node + (" (spot)" if row.spot else ""),
        u.model or NONE,
        str(u.gpus),
        number(u.util_mean),
        number(u.util_p95),
        number(memory),
        row.node_class,
        number(node_idle_gpu_hours(row, report.window.hours)),
    ]
    return [*cells, money(row.idle_cost, report.summary.currency)] if priced(report) else cells


def savings_rows(savings: Savings, currency: str | None) -> list[tuple[str, str]]:
    """What the replay through gpupack's admission and placement frees, as (label, value)."""
    freed = number(savings.removable_gpu_hours)
    if savings.removable_cost is not None:
        freed += f" ({money(savings.removable_cost, currency)})"
    rows = [
        ("GPU nodes now", f"{savings.gpu_nodes_now:,}"),
        ("GPU nodes needed", f"{savings.gpu_nodes_needed:,}"),
        ("removable nodes", ", ".join(savings.removable) or "none"),
        ("removable GPU-hours", freed),
    ]
    after = percent(savings.util_after)
    if savings.unmeasured_pods:
        after += f" ({savings.unmeasured_pods:,} pods unmeasured, counted idle)"
    rows.append(("utilization of GPUs in use after", after))
    if savings.overloaded:
        rows.append(("over capacity after (no saving)", ", ".join(savings.overloaded)))
    if savings.unplaced:
        rows.append(("pods the replay could not place", ", ".join(savings.unplaced)))
    return rows


def compare_rows(c: Comparison) -> list[tuple[str, str, str]]:
    """The before/after table as (label, before, after)."""
    b, a = c.before, c.after
    return [
        ("window", window_text(b.window), window_text(a.window)),
        ("mean utilization of GPUs in use", percent(b.gpu_util_mean), percent(a.gpu_util_mean)),
        ("GPUs in use", number(b.gpus_in_use, 2), number(a.gpus_in_use, 2)),
        ("GPU nodes in use", number(b.gpu_nodes_in_use, 2), number(a.gpu_nodes_in_use, 2)),
        ("GPU-hours", number(b.gpu_hours), number(a.gpu_hours)),
        (f"work ({c.work_unit})", number(b.work, 3), number(a.work, 3)),
        (f"GPU-hours per {c.work_unit}", number(b.gpu_hours_per_work, 4), number(a.gpu_hours_per_work, 4)),
    ]


def verdict_line(c: Comparison) -> str:
    """The verdict led by its word, so it reads without colour."""
    return f"{'effective' if c.effective else 'not effective'}: {c.verdict}"
