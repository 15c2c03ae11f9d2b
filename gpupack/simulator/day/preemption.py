"""The synthetic day with kube-scheduler's preemption alone and with the extender's preempt verb: what the verb
saves in pods killed, pods killed for nothing and GPU-hours of work lost.

Both runs are the `gpupack` run (`run_day`), the same in everything but the scheduler configuration's
`preemptVerb`. One day's preemptions are few and each changes what follows (a victim's Job starts again, the
preemptor lands elsewhere), so one seed says little: the comparison runs `seeds` days (seed, seed + 1, ...) and
gives each number's mean per day in both runs and the paired difference with its standard error.

    gpupack simulate --scenario scenarios/contention-day.yaml --compare-preemption --seeds 20
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gpupack.simulator.day.metrics import DayResult
from gpupack.simulator.day.scenario import Scenario
from gpupack.simulator.day.simulate import Preemption, run_day

RUNS: tuple[Preemption, ...] = ("scheduler", "verb")
"""kube-scheduler's preemption alone (no `preemptVerb`), then with the extender's verb (the shipped one)."""
LABELS = {"scheduler": "kube-scheduler alone", "verb": "with the preempt verb"}

ROWS = (
    ("preemptions", "preemptions"),
    ("pods preempted (victims)", "victims"),
    ("  of them training", "training_victims"),
    ("  of them batch", "batch_victims"),
    ("  killed for nothing (wasted)", "wasted_victims"),
    ("GPU-hours of work lost", "gpu_hours_lost"),
    ("  by victims killed for nothing", "wasted_gpu_hours_lost"),
    ("pending pod-minutes, inference", "inference_pending_minutes"),
    ("pending pod-minutes, training", "training_pending_minutes"),
    ("mean utilization of GPUs in use, %", "mean_utilization_pct"),
)
"""What the table shows, per day: (text, key of `numbers`)."""


def numbers(result: DayResult) -> dict[str, float]:
    """The preemption numbers of one day (`ROWS`)."""
    summary = result.summary()
    by_class = summary["victims_by_class"]
    pending = summary["pending_pod_minutes_by_class"]
    return {
        "preemptions": summary["preemptions"],
        "victims": summary["victims"],
        "training_victims": by_class.get("training", 0),
        "batch_victims": by_class.get("batch", 0),
        "wasted_victims": summary["wasted_victims"],
        "gpu_hours_lost": summary["gpu_hours_lost"],
        "wasted_gpu_hours_lost": summary["wasted_gpu_hours_lost"],
        "inference_pending_minutes": pending.get("inference", 0.0),
        "training_pending_minutes": pending.get("training", 0.0),
        "mean_utilization_pct": summary["mean_utilization_pct"],
    }


def _se(values: Sequence[float]) -> float:
    """Standard error of the mean (0 for one value)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def compare_preemption(scenario: Scenario, seeds: int) -> dict[str, Any]:
    """The scenario's `gpupack` day under each of `RUNS`, for `seeds` seeds from the scenario's: per run the mean
    per day of each number, and per number the paired difference (verb minus alone) with its standard error."""
    if seeds < 1:
        raise ValueError("--seeds must be at least 1")
    per_run: dict[str, list[dict[str, float]]] = {run: [] for run in RUNS}
    for offset in range(seeds):
        day = scenario.with_changes(seed=scenario.seed + offset)
        for run in RUNS:
            per_run[run].append(numbers(run_day(day, "gpupack", preemption=run)))
    keys = [key for _, key in ROWS]
    means = {run: {k: round(statistics.fmean(d[k] for d in days), 2) for k in keys} for run, days in per_run.items()}
    differences: dict[str, dict[str, float]] = {}
    for key in keys:
        paired = [v[key] - s[key] for s, v in zip(per_run["scheduler"], per_run["verb"], strict=True)]
        differences[key] = {"mean": round(statistics.fmean(paired), 2), "se": round(_se(paired), 2)}
    return {
        "scenario": scenario.name,
        "seeds": [scenario.seed + i for i in range(seeds)],
        "runs": means,
        "verb_minus_alone": differences,
    }


def table(data: Mapping[str, Any]) -> str:
    """The comparison as a fixed-width table: the mean per day in each run, and the paired difference."""
    seeds = data["seeds"]
    lines = [
        f"scenario {data['scenario']}, gpupack run, mean per day over {len(seeds)} seeds ({seeds[0]}-{seeds[-1]})",
        f"{'':<38}{LABELS['scheduler']:>22}{LABELS['verb']:>22}{'difference (± SE)':>22}",
    ]
    for text, key in ROWS:
        diff = data["verb_minus_alone"][key]
        change = f"{diff['mean']:+.2f} ± {diff['se']:.2f}"
        lines.append(f"{text:<38}{data['runs']['scheduler'][key]:>22.2f}{data['runs']['verb'][key]:>22.2f}{change:>22}")
    return "\n".join(lines)
