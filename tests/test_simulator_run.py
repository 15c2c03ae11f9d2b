"""simulate(): the issue's JSON shape, progress, curves, and the reproduction on the real default trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupack.simulator.report import table
from gpupack.simulator.run import Progress, load_workload, make_workload, simulate
from tests.test_simulator_kit import make_node, make_pod

TRACE = Path(__file__).resolve().parents[1] / "data/alibaba-gpu-v2023/csv"


def small_workload():  # type: ignore[no-untyped-def]
    nodes = [make_node(f"n{i}", gpus=g) for i, g in enumerate((8, 8, 4, 2))]
    pods = (
        [make_pod(f"s{i}", cpu=2000, gpus=1, milli=m) for i, m in enumerate((250, 500, 300, 700) * 3)]
        + [make_pod(f"w{i}", cpu=8000, gpus=g) for i, g in enumerate((1, 2, 4, 1))]
        + [make_pod(f"c{i}", cpu=4000) for i in range(3)]
    )
    return make_workload("small", nodes, pods)


def test_report_has_the_issue_json_shape_with_means_and_spreads() -> None:
    events: list[Progress] = []
    report = simulate(small_workload(), ["bestfit", "fgd"], seeds=[1, 2, 3], progress=events.append)
    data = report.to_json()
    policies = data["policies"]
    assert isinstance(policies, dict) and set(policies) == {"bestfit", "fgd"}
    for result in policies.values():
        assert result["seeds"] == 3
        assert set(result["at"]) == {"100", "130"} and set(result["spread"]) == {"100", "130"}
        assert set(result["at"]["130"]) == {"alloc_pct", "unallocated_gpus", "frag_ratio", "idle_nodes"}
        assert 0 < result["at"]["130"]["alloc_pct"] <= 100
    assert {(e.policy, e.seed) for e in events} == {(p, s) for p in ("bestfit", "fgd") for s in (1, 2, 3)}
    assert all(e.runs == 6 and e.done <= e.total for e in events)
    grid, alloc = report.curve("fgd")
    assert grid == sorted(grid) and grid[-1] >= 125 and len(alloc) == len(grid)
    assert all(0 <= a <= 100 for a in alloc)


def test_unknown_policies_are_refused_before_running() -> None:
    with pytest.raises(KeyError, match="unknown policy nope"):
        simulate(small_workload(), ["bestfit", "nope"])


@pytest.mark.parametrize(("policy", "published"), [("bestfit", 93.08), ("fgd", 95.39)])
def test_one_seed_on_the_default_trace_lands_near_the_published_figure(policy: str, published: float) -> None:
    report = simulate(load_workload("default", TRACE), [policy], seeds=[42])
    at130 = report.policies[policy].mean(130)
    assert abs(at130["alloc_pct"] - published) < 1.0
    assert at130["unallocated_gpus"] == pytest.approx(6212 * (1 - at130["alloc_pct"] / 100))


def test_the_published_figures_are_shown_only_beside_the_published_trace() -> None:
    small = small_workload()
    report = simulate(make_workload("default", small.nodes, small.pods), ["fgd"], seeds=[1])
    assert "95.23 / 95.39" in table(report)  # a workload named like the paper's
    assert "published" not in table(report, published=False)  # ... read from another --trace directory
    assert "published" not in table(simulate(small, ["fgd"], seeds=[1]))


def test_parallel_runs_give_the_serial_numbers_in_the_same_order() -> None:
    workload = small_workload()
    serial = simulate(workload, ["bestfit", "fgd", "gpupack"], seeds=[1, 2, 3])
    events: list[Progress] = []
    parallel = simulate(workload, ["bestfit", "fgd", "gpupack"], seeds=[1, 2, 3], jobs=2, progress=events.append)
    assert parallel.to_json(digits=12) == serial.to_json(digits=12)
    for name in ("bestfit", "fgd", "gpupack"):
        for a, b in zip(serial.policies[name].runs, parallel.policies[name].runs, strict=True):
            assert a.seed == b.seed and (a.alloc_pct == b.alloc_pct).all()
    assert sorted((e.policy, e.seed) for e in events) == [
        (p, s) for p in ("bestfit", "fgd", "gpupack") for s in (1, 2, 3)
    ]
    assert sorted(e.run for e in events) == list(range(9)) and all(e.done == e.total for e in events)


def test_jobs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        simulate(small_workload(), ["bestfit"], jobs=0)
