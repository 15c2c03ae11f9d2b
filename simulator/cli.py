"""`gpupack simulate`: replay a trace through the placement policies with the published protocol."""

from __future__ import annotations

import argparse
import json
import sys
import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from simulator.policies import POLICIES
from simulator.report import plot, table
from simulator.run import Progress as RunProgress
from simulator.run import load_workload, simulate
from simulator.trace import default_trace_dir, pod_list_path

PROGRESS_AFTER = 2.0
"""Seconds after which a progress bar appears on standard error (short runs print only the result)."""


def run(args: argparse.Namespace) -> int:
    """Run the simulation; 2 when the trace cannot be read."""
    trace_dir = args.trace or default_trace_dir()
    pods = pod_list_path(trace_dir, args.variant)
    if not pods.is_file():
        raise ValueError(
            f"no pod list at {pods}: download cluster-trace-gpu-v2023 from https://github.com/alibaba/clusterdata "
            "and pass its csv directory with --trace"
        )
    if args.seeds < 1:
        raise ValueError("--seeds must be at least 1")
    unknown = sorted(set(args.policy or ()) - set(POLICIES))
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    workload = load_workload(args.variant, trace_dir)
    names = args.policy or list(POLICIES)
    started = time.monotonic()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=None,
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as bar:
        task = None

        def progress(p: RunProgress) -> None:
            nonlocal task
            if time.monotonic() - started < PROGRESS_AFTER:
                return
            total = p.runs * p.total
            if task is None:
                task = bar.add_task("simulating", total=total)
            bar.update(task, completed=p.run * p.total + p.done, description=f"{p.policy} seed {p.seed}")

        report = simulate(workload, names, seeds=range(42, 42 + args.seeds), progress=progress)
    if args.plot:
        plot(report, args.plot)
    print(json.dumps(report.to_json(), indent=2) if args.json else table(report))
    return 0


def run_scenario(args: argparse.Namespace) -> int:
    """The synthetic day of `args.scenario` under spread and gpupack: table or JSON, and the plot."""
    from simulator.day import compare, load_scenario, plot_day, run_all
    from simulator.day_metrics import table as day_table

    scenario = load_scenario(args.scenario)
    changes = {k: v for k, v in (("scale", args.scale), ("hours", args.hours)) if v is not None}
    scenario = scenario.with_changes(**changes) if changes else scenario
    results = run_all(scenario)
    comparison = compare(scenario, results)
    print(json.dumps(comparison, indent=2) if args.json else day_table(comparison))
    if args.plot:
        plot_day(results, args.plot)
    return 0
