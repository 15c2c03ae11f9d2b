"""The before/after verdict: the guide's (docs/method.md) rise from about 20 % to 60 %, or the same work on fewer
GPU-hours or GPU
nodes, worked out by hand; node-hours, not node names, for clusters whose autoscaler replaces nodes."""

from __future__ import annotations

from gpupack.report.compare import compare, period
from gpupack.report.usage import GpuUsage, Usage, Window

WEEK = Window(0.0, 7 * 86400.0)


def _usage(*gpus: tuple[str, float, float | None]) -> Usage:
    """GPUs as (node, utilization %, hours present or None for the whole window), two per node name given."""
    out = [
        GpuUsage(node=node, gpu=str(i), util_mean=util, hours=hours)
        for n, (node, util, hours) in enumerate(gpus)
        for i in (2 * n, 2 * n + 1)
    ]
    return Usage(window=WEEK, source="test", gpus=tuple(out))


def test_a_small_rise_on_the_same_nodes_is_not_effective() -> None:
    """50 % to 56 % on the same four nodes: GPU-hours per busy GPU-hour fall 11 %, which only restates the
    utilization; the same work did not take fewer GPU-hours or nodes."""
    before = period(_usage(*[(f"n{i}", 50.0, None) for i in range(4)]))
    after = period(_usage(*[(f"n{i}", 56.0, None) for i in range(4)]))
    verdict = compare(before, after)
    assert not verdict.effective
    assert verdict.verdict.startswith("not effective yet: the utilization of GPUs in use went from 50 % to 56 %")


def test_the_guides_rise_is_effective() -> None:
    before = period(_usage(*[(f"n{i}", 20.0, None) for i in range(4)]))
    after = period(_usage(*[(f"n{i}", 65.0, None) for i in range(4)]))
    verdict = compare(before, after)
    assert verdict.effective and "rose from 20 % to 65 %" in verdict.verdict


def test_the_same_work_on_fewer_nodes_is_effective() -> None:
    """Four nodes at 40 % (8 GPUs x 168 h x 0.4 = 537.6 busy GPU-hours), then the same work on three nodes at
    53.3 %: 25 % fewer GPU-hours and nodes."""
    before = period(_usage(*[(f"n{i}", 40.0, None) for i in range(4)]))
    after = period(_usage(*[(f"n{i}", 40.0 * 4 / 3, None) for i in range(3)]))
    assert before.work == after.work == 8 * 168 * 0.4
    assert (before.gpu_hours, after.gpu_hours) == (8 * 168, 6 * 168)
    assert (before.gpu_nodes_in_use, after.gpu_nodes_in_use) == (4, 3)
    verdict = compare(before, after)
    assert verdict.effective
    assert "25% fewer GPU-hours" in verdict.verdict and "25% fewer GPU nodes" in verdict.verdict


def test_less_work_on_fewer_gpu_hours_is_not_the_same_work() -> None:
    before = period(_usage(*[(f"n{i}", 40.0, None) for i in range(4)]))
    after = period(_usage(*[(f"n{i}", 40.0, None) for i in range(2)]))  # half the work on half the nodes
    assert not compare(before, after).effective


def test_nodes_in_use_are_node_hours_over_the_window() -> None:
    """The autoscaler replaced n1 by n2 mid-week: two node names, one node's time."""
    usage = _usage(("n0", 50.0, None), ("n1", 50.0, 84.0), ("n2", 50.0, 84.0))
    assert period(usage).gpu_nodes_in_use == 2.0
    assert period(usage).gpu_hours == 2 * 168 + 4 * 84


def test_with_a_business_metric_the_work_per_gpu_hour_decides() -> None:
    """1,000 requests on 4 nodes, then 1,300 on the same 4 at the same GPU-hours: 23 % fewer GPU-hours per
    request."""
    usage = _usage(*[(f"n{i}", 40.0, None) for i in range(4)])
    verdict = compare(period(usage, 1000.0), period(usage, 1300.0), "unit of --work-query")
    assert verdict.effective and "23% fewer GPU-hours" in verdict.verdict
