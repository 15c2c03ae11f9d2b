"""`gpupack simulate`: replay a trace through the placement policies with the published protocol."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gpupack.simulator.policies import POLICIES
from gpupack.simulator.report import plot, table
from gpupack.simulator.run import Progress as RunProgress
from gpupack.simulator.run import load_workload, simulate
from gpupack.simulator.trace import default_trace_dir, pod_list_path
from gpupack.simulator.variants import STRESS

PROGRESS_AFTER = 2.0
"""Seconds after which a progress bar appears on standard error (short runs print only the result)."""


TRACE_ONLY = ("trace", "variant", "policy", "seeds", "jobs")
SCENARIO_ONLY = ("scale", "hours", "compare_preemption")
DEFAULT_SEEDS = 10
PREEMPTION_SEEDS = 20
"""Days the preemption comparison runs by default: one day's few preemptions say little."""


def available_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count: a pinned run uses its CPU)."""
    return len(os.sched_getaffinity(0))


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags of the other mode (trace replay or synthetic day) rather than ignore them, and a plot path
    that cannot be written, before minutes of simulation."""
    wrong: tuple[str, ...] = SCENARIO_ONLY if args.scenario is None else TRACE_ONLY
    if args.scenario is not None and getattr(args, "compare_preemption", None):
        wrong = tuple(name for name in wrong if name != "seeds")  # the comparison's days
    given = [f"--{name.replace('_', '-')}" for name in wrong if getattr(args, name, None) is not None]
    if given:
        mode = "--scenario" if args.scenario is not None else "the trace replay"
        raise ValueError(f"{', '.join(given)} cannot be used with {mode}")
    if args.plot is not None:
        check_plot_path(args.plot)


def check_plot_path(path: Path) -> None:
    """A PNG file whose directory exists and can be written (matplotlib would otherwise add `.png` to a name
    without it, or fail only after the run)."""
    if path.suffix.lower() != ".png":
        raise ValueError(f"--plot {path}: the plot is a PNG file, name it FILE.png")
    if path.is_dir():
        raise ValueError(f"--plot {path}: is a directory")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ValueError(f"--plot {path}: {folder} is not a directory this user can write to")


def run(args: argparse.Namespace) -> int:
    """Run the simulation; 2 when the trace cannot be read."""
    # rich is in the simulate extra: imported here, since `mig-plan --compare` imports this module without it.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    check_flags(args)
    trace_dir = args.trace or default_trace_dir()
    variant = args.variant or "default"
    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    pods = pod_list_path(trace_dir, "default" if variant in STRESS else variant)
    if not pods.is_file():
        raise ValueError(
            f"no pod list at {pods}: download cluster-trace-gpu-v2023 from https://github.com/alibaba/clusterdata "
            "and pass its csv directory with --trace"
        )
    if seeds < 1:
        raise ValueError("--seeds must be at least 1")
    unknown = sorted(set(args.policy or ()) - set(POLICIES))
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    workload = load_workload(variant, trace_dir)
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

        jobs = args.jobs or available_cores()
        report = simulate(workload, names, seeds=range(42, 42 + seeds), progress=progress, jobs=jobs)
    published = trace_dir.resolve() == default_trace_dir().resolve()  # the paper's figures are for its files only
    print(json.dumps(report.to_json(), indent=2) if args.json else table(report, published))  # before the plot
    if args.plot:
        plot(report, args.plot)
    return 0


def run_scenario(args: argparse.Namespace) -> int:
    """The synthetic day of `args.scenario` without gpupack, under spread and under gpupack: table or JSON, and
    the plot."""
    from gpupack.simulator.day.metrics import table as day_table
    from gpupack.simulator.day.simulate import compare, load_scenario, plot_day, run_all

    check_flags(args)
    scenario = load_scenario(args.scenario)
    changes = {k: v for k, v in (("scale", args.scale), ("hours", args.hours)) if v is not None}
    scenario = scenario.with_changes(**changes) if changes else scenario
    if getattr(args, "compare_preemption", None):
        from gpupack.simulator.day.preemption import compare_preemption
        from gpupack.simulator.day.preemption import table as preemption_table

        if args.plot:
            raise ValueError("--plot cannot be used with --compare-preemption")
        data = compare_preemption(scenario, PREEMPTION_SEEDS if args.seeds is None else args.seeds)
        print(json.dumps(data, indent=2) if args.json else preemption_table(data))
        return 0
    results = run_all(scenario)
    comparison = compare(scenario, results)
    print(json.dumps(comparison, indent=2) if args.json else day_table(comparison))
    if args.plot:
        plot_day(results, args.plot)
    return 0
