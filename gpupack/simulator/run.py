"""Run policies over seeds on a trace and aggregate: mean and spread per report point, mean curves for plots.

    workload = load_workload(variant="default")
    report = simulate(workload, ["fgd", "bestfit"], seeds=range(42, 52))
    report.to_json()   # {"policies": {"fgd": {"at": {"100": {...}, "130": {...}}, "spread": {...}, "seeds": 10}}}
    report.curve("fgd")  # (arrived % grid, mean allocation %) for the plot

Seeds default to 42..51, the artifact's. Each (policy, seed) run starts from an empty cluster and its own
Generator(seed), so a policy's numbers do not depend on which other policies run alongside.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpupack.extender.fragmentation import TypicalShapes, typical_shapes
from gpupack.simulator.cluster import ClusterState
from gpupack.simulator.metrics import FragmentationMeter, PointMetrics
from gpupack.simulator.policies import POLICIES
from gpupack.simulator.policy import PolicyContext, PolicyFactory
from gpupack.simulator.protocol import DEFAULT_RATIO, REPORT_POINTS, SeedRun, build_arrivals, run_protocol
from gpupack.simulator.trace import (
    DEFAULT_NODE_LIST,
    MILLI,
    NodeRecord,
    PodRecord,
    default_trace_dir,
    pod_list_path,
    read_nodes,
    read_pods,
)
from gpupack.simulator.variants import STRESS, generate

DEFAULT_SEEDS = tuple(range(42, 52))
"""The artifact's ten seeds."""
METRICS = ("alloc_pct", "unallocated_gpus", "frag_ratio", "idle_nodes")


@dataclass(frozen=True)
class Workload:
    """A node list and a pod list, with the FGD typical shapes of the pod list."""

    name: str
    nodes: tuple[NodeRecord, ...]
    pods: tuple[PodRecord, ...]
    shapes: TypicalShapes = field(repr=False)


def make_workload(name: str, nodes: Sequence[NodeRecord], pods: Sequence[PodRecord]) -> Workload:
    """A workload from records (typical shapes computed on the original pods, as the authors do)."""
    models = ClusterState(nodes).models
    return Workload(name, tuple(nodes), tuple(pods), typical_shapes((p.shape for p in pods), models))


def load_workload(
    variant: str = "default", trace_dir: Path | None = None, node_list: str = DEFAULT_NODE_LIST
) -> Workload:
    """Read a pod-list variant and the node list from the trace directory (default: the shared copy); a
    `gpupack.simulator.variants.STRESS` name is generated from the default list."""
    directory = trace_dir or default_trace_dir()
    nodes = read_nodes(directory / node_list)
    if variant in STRESS:  # generated from the default list on the fly (`gpupack.simulator.variants`)
        pods = generate(read_pods(pod_list_path(directory, "default")), nodes, STRESS[variant], directory)
        return make_workload(variant, nodes, pods)
    return make_workload(variant, nodes, read_pods(pod_list_path(directory, variant)))


@dataclass(frozen=True)
class Progress:
    """Where a `simulate()` call is: run `run` of `runs` (policy x seed), arrivals done in that run."""

    policy: str
    seed: int
    run: int
    runs: int
    done: int
    total: int


ProgressCallback = Callable[[Progress], None]


def run_seed(
    workload: Workload,
    factory: PolicyFactory,
    seed: int,
    ratio: float = DEFAULT_RATIO,
    points: Sequence[int] = REPORT_POINTS,
    progress: Callable[[int, int], None] | None = None,
) -> SeedRun:
    """One run: a fresh cluster, the seed's arrival list and tie order, the policy built for it."""
    rng = np.random.default_rng(seed)
    state = ClusterState(workload.nodes)
    arrivals = build_arrivals(workload.pods, state.total_gpus * MILLI, rng, ratio)
    tiebreak = rng.permutation(state.size).astype(np.int64)
    policy = factory(PolicyContext(rng=rng, tiebreak=tiebreak, shapes=workload.shapes, state=state))
    meter = FragmentationMeter(workload.shapes, state)
    return run_protocol(policy, state, arrivals, meter, seed=seed, points=points, progress=progress)


@dataclass(frozen=True)
class PolicyResult:
    """All seeds of one policy."""

    name: str
    runs: tuple[SeedRun, ...]

    def values(self, point: int) -> list[PointMetrics]:
        """The figures of each seed that reached `point`."""
        return [m for r in self.runs if (m := r.at.get(point)) is not None]

    def mean(self, point: int) -> dict[str, float]:
        """Mean over seeds of each figure at `point` (empty if no seed reached it)."""
        values = self.values(point)
        return {k: float(np.mean([v.as_dict()[k] for v in values])) for k in METRICS} if values else {}

    def spread(self, point: int) -> dict[str, float]:
        """Population standard deviation over seeds of each figure at `point`."""
        values = self.values(point)
        return {k: float(np.std([v.as_dict()[k] for v in values])) for k in METRICS} if values else {}

    def curve(self) -> tuple[list[int], list[float]]:
        """Mean allocation % at each whole arrived-demand %, averaged first within a run, then over seeds."""
        per_run: list[dict[int, float]] = []
        for run in self.runs:
            rounded = np.rint(run.arrived_pct).astype(np.int64)
            per_run.append({int(p): float(run.alloc_pct[rounded == p].mean()) for p in np.unique(rounded)})
        grid = sorted(set().union(*per_run)) if per_run else []
        means = [float(np.mean([r[p] for r in per_run if p in r])) for p in grid]
        return grid, means


@dataclass(frozen=True)
class Report:
    """Results of `simulate()`."""

    workload: str
    points: tuple[int, ...]
    policies: Mapping[str, PolicyResult]

    def to_json(self, digits: int = 3) -> dict[str, object]:
        """`{"policies": {NAME: {"at": {"100": {...}, "130": {...}}, "spread": {...}, "seeds": n}}}`."""

        def rounded(values: dict[str, float]) -> dict[str, float]:
            return {k: round(v, digits) for k, v in values.items()}

        return {
            "policies": {
                name: {
                    "at": {str(p): rounded(result.mean(p)) for p in self.points},
                    "spread": {str(p): rounded(result.spread(p)) for p in self.points},
                    "seeds": len(result.runs),
                }
                for name, result in self.policies.items()
            }
        }

    def curve(self, policy: str) -> tuple[list[int], list[float]]:
        """Arrived demand % grid and mean allocation % of a policy."""
        return self.policies[policy].curve()


def simulate(
    workload: Workload,
    policies: Iterable[str],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    ratio: float = DEFAULT_RATIO,
    points: Sequence[int] = REPORT_POINTS,
    progress: ProgressCallback | None = None,
    registry: Mapping[str, PolicyFactory] = POLICIES,
    jobs: int = 1,
) -> Report:
    """Run every policy on every seed, in `jobs` processes (1: in this one). Raises KeyError naming an unknown
    policy before running anything."""
    names = list(policies)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise KeyError(f"unknown policy {', '.join(unknown)}; known: {', '.join(registry)}")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    runs = len(names) * len(seeds)
    tasks = [(name, seed) for name in names for seed in seeds]
    if jobs == 1 or runs == 1:
        done_runs = [_serial(workload, registry, task, index, runs, ratio, points, progress) for index, task in
                     enumerate(tasks)]  # fmt: skip
    else:
        done_runs = _parallel(workload, registry, tasks, min(jobs, runs), ratio, points, progress)
    results = {
        name: PolicyResult(name, tuple(run for (of, _), run in zip(tasks, done_runs, strict=True) if of == name))
        for name in names
    }
    return Report(workload.name, tuple(points), results)


def _serial(
    workload: Workload,
    registry: Mapping[str, PolicyFactory],
    task: tuple[str, int],
    index: int,
    runs: int,
    ratio: float,
    points: Sequence[int],
    progress: ProgressCallback | None,
) -> SeedRun:
    name, seed = task
    hook = None
    if progress is not None:

        def hook(done: int, total: int) -> None:
            progress(Progress(name, seed, index, runs, done, total))

    return run_seed(workload, registry[name], seed, ratio, points, hook)


_WORKER: tuple[Workload, Mapping[str, PolicyFactory]] | None = None
"""A worker process's workload and policies, inherited at fork (never pickled)."""


def _adopt(workload: Workload, registry: Mapping[str, PolicyFactory]) -> None:
    global _WORKER
    _WORKER = (workload, registry)


def _run_task(name: str, seed: int, ratio: float, points: Sequence[int]) -> SeedRun:
    assert _WORKER is not None, "a worker without its workload"
    workload, registry = _WORKER
    return run_seed(workload, registry[name], seed, ratio, points)


def _parallel(
    workload: Workload,
    registry: Mapping[str, PolicyFactory],
    tasks: Sequence[tuple[str, int]],
    jobs: int,
    ratio: float,
    points: Sequence[int],
    progress: ProgressCallback | None,
) -> list[SeedRun]:
    """The runs in `jobs` forked processes. Each run is a pure function of (workload, policy, seed), so the
    numbers are the serial run's; only the order they finish in differs, and results are put back in order.
    Progress is reported per finished run (an arrival count would cross processes for every pod)."""
    context = multiprocessing.get_context("fork")  # the workload and the policies' factories are inherited as-is
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_adopt, initargs=(workload, registry)) as pool:
        futures = {pool.submit(_run_task, name, seed, ratio, points): i for i, (name, seed) in enumerate(tasks)}
        out: list[SeedRun | None] = [None] * len(tasks)
        finished = 0
        for future in as_completed(futures):
            index = futures[future]
            out[index] = future.result()
            finished += 1
            if progress is not None:
                name, seed = tasks[index]
                total = out[index].arrived_pct.size  # type: ignore[union-attr]
                progress(Progress(name, seed, finished - 1, len(tasks), total, total))
    return [run for run in out if run is not None]
