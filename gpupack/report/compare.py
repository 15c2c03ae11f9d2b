"""Before and after: the guide's (docs/method.md) two numbers for each window, and whether the change worked.

The numbers: the mean utilization of the GPUs in use (a GPU above IN_USE percent, or one the exporter maps a pod
to), and GPU-hours and GPU nodes per unit of work. The default unit of work is the busy GPU-hour (each GPU's
hours times its utilization): the same work done on fewer GPU-hours is the saving. `--work-query` names a
business metric instead (requests served, tokens), whose total over each window the caller measures.

The verdict, in the guide's words: effective when the utilization of GPUs in use rose from about 20 % to 60 %
or more, or when the same work took fewer GPU-hours or fewer GPU nodes (by at least FEWER).
"""

from __future__ import annotations

from gpupack.report.document import Comparison, Period
from gpupack.report.usage import Usage

IN_USE = 1.0
"""Percent above which a GPU counts as in use."""
RISE_FROM = 30.0
"""'from about 20 %': the before side must be at most this..."""
RISE_TO = 60.0
"""...and the after side at least this."""
DEFAULT_UNIT = "busy GPU-hour"
"""The unit of work without `--work-query`: one GPU-hour at 100 %."""
FEWER = 0.10
"""A drop of GPU-hours (or GPU nodes) per unit of work this large counts as 'fewer'."""


def period(usage: Usage, work: float | None = None) -> Period:
    """One side of the comparison from its window's usage; `work`: the business metric's total (None: busy
    GPU-hours)."""
    metric = usage.metric
    gpus = usage.physical()
    used = [g for g in gpus if (g.utilization(metric) or 0.0) > IN_USE or g.pods]
    utils = [u for g in used if (u := g.utilization(metric)) is not None]
    hours = sum(g.present_hours(usage.window) for g in gpus)
    busy = sum(g.present_hours(usage.window) * (g.utilization(metric) or 0.0) / 100.0 for g in gpus)
    window_hours = usage.window.hours
    node_hours: dict[str, float] = {}
    for g in used:  # a node's hours are its GPUs' longest: nodes the autoscaler replaced count for their time
        node_hours[g.node] = max(node_hours.get(g.node, 0.0), g.present_hours(usage.window))
    return Period(
        window=usage.window,
        gpu_util_mean=sum(utils) / len(utils) if utils else None,
        gpus_in_use=sum(g.present_hours(usage.window) for g in used) / window_hours,
        gpu_nodes_in_use=sum(node_hours.values()) / window_hours,
        gpu_hours=hours,
        work=busy if work is None else work,
    )


def _per_work(value: float, work: float | None) -> float | None:
    return value / work if work else None


def compare(before: Period, after: Period, work_unit: str = DEFAULT_UNIT) -> Comparison:
    """The verdict on two periods.

    With a business metric as the unit of work, GPU-hours and GPU nodes per unit are compared. With the default
    unit, busy GPU-hours, GPU-hours per unit is 100 over the utilization, so comparing it would only restate the
    utilization: the same work must have taken fewer GPU-hours (or GPU nodes) outright, the work itself within
    FEWER of the before side's or more."""
    reasons: list[str] = []
    b, a = before.gpu_util_mean, after.gpu_util_mean
    if b is not None and a is not None and b <= RISE_FROM and a >= RISE_TO:
        reasons.append(f"the utilization of GPUs in use rose from {b:.0f} % to {a:.0f} %")
    hours: tuple[float | None, float | None]
    nodes: tuple[float | None, float | None]
    if work_unit != DEFAULT_UNIT:
        hours = (_per_work(before.gpu_hours, before.work), _per_work(after.gpu_hours, after.work))
        nodes = (_per_work(before.gpu_nodes_in_use, before.work), _per_work(after.gpu_nodes_in_use, after.work))
    elif before.work and (after.work or 0.0) >= before.work * (1 - FEWER):  # the same work, or more
        hours = (before.gpu_hours, after.gpu_hours)
        nodes = (before.gpu_nodes_in_use, after.gpu_nodes_in_use)
    else:
        hours = nodes = (None, None)
    (hours_b, hours_a), (nodes_b, nodes_a) = hours, nodes
    if hours_b and hours_a is not None and hours_a <= hours_b * (1 - FEWER):
        reasons.append(f"the same work took {1 - hours_a / hours_b:.0%} fewer GPU-hours")
    if nodes_b and nodes_a is not None and nodes_a <= nodes_b * (1 - FEWER):
        reasons.append(f"it took {1 - nodes_a / nodes_b:.0%} fewer GPU nodes")
    if reasons:
        return Comparison(before, after, work_unit, True, "effective: " + "; ".join(reasons))
    shown_b = "?" if b is None else f"{b:.0f} %"
    shown_a = "?" if a is None else f"{a:.0f} %"
    verdict = (
        f"not effective yet: the utilization of GPUs in use went from {shown_b} to {shown_a}, and the same work "
        f"did not take {FEWER:.0%} fewer GPU-hours or GPU nodes"
    )
    return Comparison(before, after, work_unit, False, verdict)
