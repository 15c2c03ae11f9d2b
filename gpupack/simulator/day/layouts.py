"""The synthetic day under other MIG layouts: issue 15's check of what `gpupack mig-plan` chooses.

Each candidate is the `gpupack` run of the same day (same seed, so the same arrivals, durations and utilizations)
with the a100-mig nodes in another layout: a stock name on every MIG node, or one layout per node as a planner
gives them. The webhook sizes pods among the profiles the nodes then advertise, so a layout changes what pods
ask for, not only where they fit. The numbers are `DayResult.summary()`'s, taken as they are.

The target: fewer GPU nodes at peak than the best single stock layout, with no more pending pod-minutes.

Reading the numbers: the webhook picks the smallest profile that *some* node advertises, cluster-wide, so one node
offering 1g.10gb sends every 8Gi replica to 1g.10gb and other nodes' 2g.10gb stay idle; a per-node plan must hold each
chosen profile's whole demand. GPU nodes count every pool, and the H100 and T4 pools' share can move by a node between
candidates (ties are broken from one random stream, which MIG placements also draw from). GPUs in use, hence GPU-hours,
are `gpupack.placement.accounting.gpus_in_use`'s estimate, which assumes all GPUs of a node hold the same layout:
approximate for a node whose GPUs differ.

    results = compare_layouts(scenario, {**stock_candidates(), "planned": planned}, jobs=2)
    print(render_table(results))
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from gpupack.core.gpus.stock import STOCK, stock_for
from gpupack.simulator.day.cluster import NodeLayout, NodeLayoutSpec, node_names
from gpupack.simulator.day.scenario import MIG_MODEL, Scenario, ScenarioError
from gpupack.simulator.day.simulate import Run, run_day

Candidate = str | Mapping[str, NodeLayoutSpec]
"""A stock layout name for every MIG node, or node name -> its layout (nodes not named keep their group's)."""

FIELDS = (
    "gpu_nodes_peak",
    "gpu_nodes_mean",
    "mig_nodes_peak",
    "mig_nodes_mean",
    "pending_pod_minutes",
    "pending_at_end",
    "gpu_hours",
    "billed_gpu_hours",
    "peak_gpus_in_use",
)
"""The summary fields a comparison keeps: GPU nodes needed at peak and on average (all of them, and the MIG nodes
alone: the part the layout decides, without the other pools' noise), pending pod-minutes and pods
still pending at the end, GPU-hours in use and billed, and GPUs in use at peak."""
RUN: Run = "gpupack"


def stock_candidates(model: str = MIG_MODEL) -> dict[str, str]:
    """Every stock layout that applies to the model, as candidates named after themselves."""
    return {name: name for name in stock_for(model)}


def candidate_layouts(scenario: Scenario, candidate: Candidate) -> dict[str, NodeLayoutSpec]:
    """The per-node layouts of a candidate: a stock name becomes that layout on every GPU of every a100-mig
    node. Raises ScenarioError for a stock name that does not apply to the A100-40GB; a per-node mapping is
    checked when the day builds its nodes (`cluster_nodes`)."""
    if not isinstance(candidate, str):
        return dict(candidate)
    counts = STOCK.get(candidate, {}).get(MIG_MODEL)
    if counts is None:
        raise ScenarioError(f"{candidate!r} is not a stock layout of the {MIG_MODEL}")
    return {
        node: NodeLayout(candidate, (counts,) * group.gpus_per_node)
        for node, group in node_names(scenario)
        if group.gpu == "a100-mig"
    }


def run_candidate(scenario: Scenario, candidate: Candidate) -> dict[str, Any]:
    """The `gpupack` run's numbers (`FIELDS`) with the candidate's layouts, and `stock`: its stock name, or None
    for a per-node mapping."""
    summary = run_day(scenario, RUN, candidate_layouts(scenario, candidate)).summary()
    return {"stock": candidate if isinstance(candidate, str) else None, **{k: summary[k] for k in FIELDS}}


_WORKER: tuple[Scenario, Mapping[str, Candidate]] | None = None
"""A worker process's scenario and candidates, inherited at fork (never pickled)."""


def _adopt(scenario: Scenario, candidates: Mapping[str, Candidate]) -> None:
    global _WORKER
    _WORKER = (scenario, candidates)


def _run_named(name: str) -> dict[str, Any]:
    assert _WORKER is not None, "a worker without its scenario"
    scenario, candidates = _WORKER
    return run_candidate(scenario, candidates[name])


def compare_layouts(scenario: Scenario, candidates: Mapping[str, Candidate], jobs: int = 1) -> dict[str, Any]:
    """Candidate name -> `run_candidate`'s numbers, in the candidates' order, in `jobs` processes (1: in this
    one).

    Every run is a pure function of (scenario, layouts), so forked workers give the serial numbers (as
    `gpupack.simulator.run.simulate` does, the scenario and candidates are inherited at fork). Stock names are checked
    before anything runs; a per-node mapping's ScenarioError comes from its run.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    for candidate in candidates.values():
        candidate_layouts(scenario, candidate)
    names = list(candidates)
    if jobs == 1 or len(names) <= 1:
        return {name: run_candidate(scenario, candidates[name]) for name in names}
    context = multiprocessing.get_context("fork")
    workers = min(jobs, len(names))
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_adopt, initargs=(scenario, candidates)) as pool:
        done = list(pool.map(_run_named, names))
    return dict(zip(names, done, strict=True))


def best_stock(results: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The stock candidate hardest to beat, None without one: fewest pending pod-minutes, then fewest GPU nodes at
    peak, then on average, then fewest GPU-hours, then name.

    Pending minutes come first because the target allows no more of them: a layout that needs fewer nodes only
    by leaving pods pending is no bar to clear.
    """
    stock = [name for name, r in results.items() if r.get("stock") is not None]
    if not stock:
        return None
    return min(stock, key=lambda n: (*(results[n][k] for k in _ORDER), n))


_ORDER = ("pending_pod_minutes", "gpu_nodes_peak", "gpu_nodes_mean", "gpu_hours")


def meets_target(result: Mapping[str, Any], bar: Mapping[str, Any]) -> bool:
    """Issue 15's target against `bar` (the best stock layout's numbers): fewer GPU nodes at peak, no more pending
    pod-minutes."""
    return bool(
        result["gpu_nodes_peak"] < bar["gpu_nodes_peak"] and result["pending_pod_minutes"] <= bar["pending_pod_minutes"]
    )


_COLUMNS = (
    ("layout", ""),
    ("nodes peak", "gpu_nodes_peak"),
    ("nodes mean", "gpu_nodes_mean"),
    ("MIG nodes peak", "mig_nodes_peak"),
    ("MIG nodes mean", "mig_nodes_mean"),
    ("pending pod-min", "pending_pod_minutes"),
    ("pending at end", "pending_at_end"),
    ("GPU-h in use", "gpu_hours"),
    ("GPU-h billed", "billed_gpu_hours"),
    ("peak GPUs", "peak_gpus_in_use"),
    ("", ""),
)


def render_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A text table of the candidates; the last column marks the best stock layout and the candidates that meet
    the target against it."""
    best = best_stock(results)
    rows = []
    for name, r in results.items():
        mark = "best stock" if name == best else ("meets target" if best and meets_target(r, results[best]) else "")
        rows.append([name, *(str(r[key]) for _, key in _COLUMNS[1:-1]), mark])
    header = [title for title, _ in _COLUMNS]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in (0, len(header) - 1) else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))).rstrip() for row in [header, *rows]]  # fmt: skip
    return "\n".join(lines)
