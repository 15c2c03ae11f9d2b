"""Run: `python -m bench.cluster [--scenario F] [--seconds-per-hour S] [--arms before,requests,gpupack]
[--consolidation POLICY] [--compare-consolidation]` (or `make bench-cluster`).

The question a user asks of gpupack: how many GPU nodes does the same work need? The scenario's day
(`scenarios/cluster-day.yaml` by default, `bench.cluster.workload`) runs time-compressed on a living cluster
(kube-apiserver, kube-scheduler, kube-controller-manager, kwok and Karpenter, `gpupack.testing.living_cluster`), in
three arms (`bench.cluster.arm`): before gpupack, gpupack's requests with the default scheduler, and gpupack. Each
arm measures over the day (after the warm-up) its GPU node-hours, peak GPU nodes, cost at the example prices, Jobs
completed, pods disrupted and pod-minutes pending; beside them stand the simulator's numbers for the same day
(`run_day`: `none`, `spread`, `gpupack`). `--compare-consolidation` runs the gpupack arm again under Karpenter's
other consolidation policies.

Results: a table on stdout, bench/results/cluster.json and bench/results/cluster-nodes.png (GPU nodes over the day,
each arm measured and simulated).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.cluster.arm import ARMS, Arm, ArmRun, Record
from bench.cluster.workload import day_of
from gpupack.core.argtypes import positive_float
from gpupack.core.checkout import REPOSITORY
from gpupack.simulator.day.scenario import load_scenario
from gpupack.simulator.day.simulate import Run, run_day

RESULTS = REPOSITORY / "bench" / "results"
SIMULATED: dict[str, Run] = {"before": "none", "requests": "spread", "gpupack": "gpupack"}
"""The simulator's run for each arm: without gpupack, gpupack's requests under LeastAllocated, gpupack."""
POLICIES = ("WhenEmptyOrUnderutilized", "WhenEmpty", "Balanced")


def measured(record: Record, measured_from: float) -> dict[str, Any]:
    """The arm's numbers over the measured day, in simulated hours and minutes."""
    hour = record.seconds_per_hour
    start = measured_from * hour / 60
    samples = [s for s in record.nodes if s[0] >= start]
    node_hours = cost = 0.0
    for (t0, nodes, price), (t1, _, _) in itertools.pairwise(samples):
        node_hours += nodes * (t1 - t0) / hour
        cost += price * (t1 - t0) / hour
    end = record.now()
    # pending within the measured day, whenever the pod was made (a Deployment's first replicas come in the warm-up)
    pending = sum(
        max(0.0, min(p.bound if p.bound is not None else end, end) - max(p.created, start))
        for p in record.pods.values()
    ) / (hour / 60)
    pool_hours: dict[str, float] = {}
    measured_pools = [s for s in record.pools if s[0] >= start]
    for (t0, pools), (t1, _) in itertools.pairwise(measured_pools):
        for pool, count in pools.items():
            pool_hours[pool] = pool_hours.get(pool, 0.0) + count * (t1 - t0) / hour
    placed: dict[str, dict[str, int]] = {}
    for life in record.pods.values():
        where = record.node_pool.get(life.node, "never bound") if life.node else "never bound"
        key = f"{re.sub(r'-[0-9]{5}$', '', life.workload)} {life.gpu or 'no GPU'}"
        placed.setdefault(key, {})[where] = placed.setdefault(key, {}).get(where, 0) + 1
    return {
        "node_hours": round(node_hours, 2),
        "nodes_peak": max((n for _, n, _ in samples), default=0),
        "cost": round(cost, 2),
        "jobs_created": record.jobs_created,
        "jobs_succeeded": record.jobs_succeeded,
        "jobs_failed": record.jobs_failed,
        "pods_disrupted": sum(p.disrupted is not None for p in record.pods.values()),
        "disrupted_by_kind": {
            k: sum(p.disrupted is not None and p.kind == k for p in record.pods.values())
            for k in ("inference", "training", "batch")
        },
        "pending_pod_minutes": round(pending, 1),
        "never_bound": sum(p.bound is None for p in record.pods.values()),
        "node_hours_by_pool": {k: round(v, 2) for k, v in sorted(pool_hours.items())},
        "pods_by_workload_and_pool": dict(sorted(placed.items())),
        "timeline": [(round(t / hour, 3), n) for t, n, _ in record.nodes],
    }


def simulated(scenario_path: Path) -> dict[str, Any]:
    scenario = load_scenario(scenario_path)
    out = {}
    for arm, run in SIMULATED.items():
        result = run_day(scenario, run)
        summary = result.summary()
        hours = [round(h + scenario.warmup_hours, 3) for h in result.hours]
        out[arm] = {
            **{k: summary[k] for k in ("node_hours", "nodes_peak", "cost", "pending_pod_minutes")},
            "timeline": list(zip(hours, result.present_nodes, strict=True)),
        }
    return out


def table(results: dict[str, Any]) -> str:
    rows = [
        ("GPU node-hours", "node_hours"),
        ("peak GPU nodes", "nodes_peak"),
        ("cost, USD (example prices)", "cost"),
        ("pod-minutes pending", "pending_pod_minutes"),
    ]
    runs = results["runs"]
    head = (
        f"{'':<30}"
        + "".join(f"{name:>24}" for name in runs)
        + "".join(f"{'sim ' + a:>16}" for a in results["simulated"])
    )
    lines = [head]
    for text, key in rows:
        measured_cells = "".join(f"{runs[name][key]:>24}" for name in runs)
        simulated_cells = "".join(f"{results['simulated'][a][key]:>16}" for a in results["simulated"])
        lines.append(f"{text:<30}{measured_cells}{simulated_cells}")
    done = "".join(f"{str(r['jobs_succeeded']) + ' / ' + str(r['jobs_created']):>24}" for r in runs.values())
    lines.append(f"{'Jobs completed / created':<30}{done}")
    lines.append(f"{'pods disrupted':<30}" + "".join(f"{r['pods_disrupted']:>24}" for r in runs.values()))
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    colours = {"before": "tab:red", "requests": "tab:orange", "gpupack": "tab:green"}
    for name, run in results["runs"].items():
        arm = name.split(" ")[0]
        xs, ys = zip(*run["timeline"], strict=True) if run["timeline"] else ((), ())
        ax.step(
            xs,
            ys,
            where="post",
            label=f"{name} (measured)",
            color=colours.get(arm),
            alpha=0.9 if " " not in name else 0.5,
        )
    for arm, run in results["simulated"].items():
        xs, ys = zip(*run["timeline"], strict=True)
        ax.step(xs, ys, where="post", linestyle="--", label=f"{arm} (simulated)", color=colours[arm], alpha=0.6)
    ax.axvline(results["warmup_hours"], color="grey", linewidth=0.8)
    ax.set_xlabel("hour of the day (warm-up left of the grey line)")
    ax.set_ylabel("GPU nodes")
    ax.set_title(f"{results['scenario']}: GPU nodes Karpenter keeps, per arm")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", type=Path, default=REPOSITORY / "scenarios" / "cluster-day.yaml")
    parser.add_argument("--seconds-per-hour", type=positive_float, default=60.0, help="real seconds per simulated hour")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated: before, requests, gpupack")
    parser.add_argument("--consolidation", default=POLICIES[0], choices=POLICIES, help="every NodePool's policy")
    parser.add_argument(
        "--compare-consolidation", action="store_true", help="also run the gpupack arm under the other policies"
    )
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"--arms: unknown arm {unknown[0]!r} (before, requests, gpupack)", file=sys.stderr)
        return 2
    scenario = load_scenario(args.scenario)
    day = day_of(scenario)
    plans: list[tuple[str, Arm, str]] = [(a, a, args.consolidation) for a in ARMS if a in arms]
    if args.compare_consolidation:
        plans += [(f"gpupack {p}", "gpupack", p) for p in POLICIES if p != args.consolidation]
    results: dict[str, Any] = {
        "scenario": scenario.name,
        "seconds_per_hour": args.seconds_per_hour,
        "warmup_hours": scenario.warmup_hours,
        "hours": scenario.hours,
        "consolidation": args.consolidation,
        "date": time.strftime("%Y-%m-%d"),
        "runs": {},
    }
    for name, arm, policy in plans:
        print(f"arm {name}: {day.minutes * args.seconds_per_hour / 60 / 60:.1f} minutes of day...", file=sys.stderr)
        with tempfile.TemporaryDirectory() as work:
            record = ArmRun(arm, day, Path(work), args.seconds_per_hour, policy).run()
        results["runs"][name] = measured(record, day.measured_from)
    results["simulated"] = simulated(args.scenario)
    before = results["runs"].get("before", {}).get("node_hours")
    after = results["runs"].get("gpupack", {}).get("node_hours")
    sim = results["simulated"]
    results["gpupack_over_before"] = round(after / before, 3) if before and after is not None else None
    results["simulated_gpupack_over_before"] = round(sim["gpupack"]["node_hours"] / sim["before"]["node_hours"], 3)
    print(table(results))
    print(f"\ngpupack / before GPU node-hours: measured {results['gpupack_over_before']}, "
          f"simulated {results['simulated_gpupack_over_before']}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    plot(results, RESULTS / "cluster-nodes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
