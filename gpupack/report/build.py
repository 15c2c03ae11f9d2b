"""A report from one window's usage and the cluster: the summary in the guide's (docs/method.md) terms, the node table,
the findings,
and (when given) the savings and the before/after comparison. Pure: every input is already read."""

from __future__ import annotations

from gpupack.report.document import Comparison, NodeRow, Report, Savings, Summary
from gpupack.report.findings import Inputs, all_findings


def advice(util: float | None, underused: float) -> str:
    """The guide's first step, when the numbers call for it."""
    if util is not None and util < underused:
        return (
            f"Mean GPU utilization is {util:.0f} %, under {underused:g} %: do not add GPUs; share, schedule and "
            "scale down first."
        )
    return ""


def summary(inputs: Inputs) -> Summary:
    """The window's numbers: mean utilization, GPUs and nodes, nodes by class, idle GPU-hours and their price."""
    gpus = inputs.physical
    utils = [u for g in gpus if (u := g.utilization(inputs.usage.metric)) is not None]
    util = sum(utils) / len(utils) if utils else None
    classes = list(inputs.classes.values())
    idle_hours = sum(inputs.idle_gpu_hours(node) for node in inputs.nodes)
    cost: float | None = None
    if inputs.prices is not None:
        priced = [(inputs.idle_gpu_hours(n), p) for n in inputs.nodes if (p := inputs.price(n)) is not None]
        cost = sum(hours * price for hours, price in priced)
    return Summary(
        gpu_util_mean=util,
        gpus=len(gpus),
        gpu_nodes=len(inputs.nodes),
        nodes_idle=classes.count("idle"),
        nodes_underused=classes.count("idle") + classes.count("underused"),
        nodes_hot=classes.count("hot"),
        idle_gpu_hours=idle_hours,
        idle_cost=cost,
        currency=None if inputs.prices is None else inputs.prices.currency,
        prices_note=None if inputs.prices is None else inputs.prices.note,
        advice=advice(util, inputs.thresholds.underused),
    )


def _idle_cost(inputs: Inputs, node: str) -> float | None:
    price = inputs.price(node)
    return None if price is None else inputs.idle_gpu_hours(node) * price


def build_report(inputs: Inputs, savings: Savings | None = None, compare: Comparison | None = None) -> Report:
    """Everything the renderers show, nodes in name order and findings most severe first."""
    rows = tuple(
        NodeRow(node, inputs.classes[name], inputs.spot(name) is not None, _idle_cost(inputs, name))
        for name, node in inputs.nodes.items()
    )
    return Report(
        window=inputs.usage.window,
        source=inputs.usage.source + ("" if inputs.cluster is None else f"; cluster: {inputs.cluster.source}"),
        metric=inputs.usage.metric,
        summary=summary(inputs),
        nodes=rows,
        findings=tuple(all_findings(inputs)),
        hourly=dict(inputs.usage.hourly),
        savings=savings,
        compare=compare,
        thresholds=inputs.thresholds,
    )
