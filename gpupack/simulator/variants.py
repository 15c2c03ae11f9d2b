"""Stress variants of the openb trace, generated on the fly from its default pod list (never written to disk).

The trace's variants each move one axis of the default pod list. Their method, measured on the files (the
upstream README says only that they are "sampled from the default one, emphasizing certain types of
workloads"):

    cpuNNN       the GPU pods as in default; CPU-only pods a subset of default's (cpu0 .. cpu100) or default's
                 plus new ones (cpu200, cpu235). Their CPU request is 0 % .. 35.9 % of the GPU nodes' CPU
                 (default 17.9 %, cpu235 35.9 %).
    gpushareNN   as many pods as default, the sharing pods NN % of the GPU demand (20.0 %, 40.1 %, 60.0 %,
                 80.0 %; default 28.5 %), CPU-only pods unchanged.
    multigpuNN   default plus new multi-GPU pods until they are NN % of the GPU demand (20.4 %, 30.2 %, 40.2 %;
                 default 7.3 %).
    gpuspecNN    default with NN % of the GPU pods restricted to some GPU models (5.2 % .. 24.9 %; default 0).

`generate()` moves one axis the same way, to any level: pods added are copies of default pods of the kind the
axis grows, drawn uniformly with the generator's seed and named `<original>-x<n>`; pods removed are drawn
uniformly among that kind; a GPU-model restriction is drawn from the restrictions the trace's gpuspec variants
use (read from the trace directory when present, else a random subset of the node models). Everything else in
the list is default's, in default's order, so a variant differs from default on its axis only.

`STRESS` names the variants beyond each axis of the shipped ones: the placement rule must hold there too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from gpupack.simulator.trace import MILLI, NodeRecord, PodRecord, pod_list_path, read_pods

Axis = Literal["cpu", "share", "multigpu", "spec"]
PREFIX = "stress-"


@dataclass(frozen=True)
class Stress:
    """One generated variant: `axis` moved to `level` (a fraction, see the module docstring)."""

    axis: Axis
    level: float
    seed: int = 7


STRESS: dict[str, Stress] = {
    "stress-cpu45": Stress("cpu", 0.45),
    "stress-cpu60": Stress("cpu", 0.60),
    "stress-share90": Stress("share", 0.90),
    "stress-share97": Stress("share", 0.97),
    "stress-multigpu50": Stress("multigpu", 0.50),
    "stress-multigpu60": Stress("multigpu", 0.60),
    "stress-spec33": Stress("spec", 0.33),
    "stress-spec50": Stress("spec", 0.50),
}
"""Beyond every shipped variant: CPU-only load over cpu235's 35.9 %, sharing over gpushare80's 80 %, multi-GPU
over multigpu40's 40 %, model-restricted pods over gpuspec25's 25 % (33 % is what the paper reports for the
production cluster)."""


def gpu_demand(pod: PodRecord) -> int:
    """Milli-GPU the pod asks for."""
    return pod.gpu_milli if pod.is_sharing else pod.num_gpu * MILLI


def level(pods: Sequence[PodRecord], nodes: Sequence[NodeRecord], axis: Axis) -> float:
    """Where a pod list stands on `axis` (the measure the module docstring defines)."""
    gpu = [p for p in pods if p.num_gpu > 0]
    demand = sum(gpu_demand(p) for p in gpu) or 1
    if axis == "cpu":
        capacity = sum(n.cpu_milli for n in nodes) or 1
        return sum(p.cpu_milli for p in pods if p.num_gpu == 0) / capacity
    if axis == "share":
        return sum(gpu_demand(p) for p in gpu if p.is_sharing) / demand
    if axis == "multigpu":
        return sum(gpu_demand(p) for p in gpu if p.num_gpu > 1) / demand
    return sum(1 for p in gpu if p.gpu_spec) / (len(gpu) or 1)


def _copies(pool: Sequence[PodRecord], rng: np.random.Generator, count: int, tag: int) -> list[PodRecord]:
    picks = rng.integers(0, len(pool), count)
    return [replace(pool[int(i)], name=f"{pool[int(i)].name}-x{tag + n}") for n, i in enumerate(picks)]


def _cpu(
    pods: list[PodRecord], nodes: Sequence[NodeRecord], target: float, rng: np.random.Generator
) -> list[PodRecord]:
    capacity = sum(n.cpu_milli for n in nodes)
    cpu_only = [p for p in pods if p.num_gpu == 0]
    have = sum(p.cpu_milli for p in cpu_only)
    want = target * capacity
    if want <= have:  # a subset of default's CPU-only pods, dropped in random order until under the target
        dropped: set[str] = set()
        for i in rng.permutation(len(cpu_only)):
            if have <= want:
                break
            dropped.add(cpu_only[int(i)].name)
            have -= cpu_only[int(i)].cpu_milli
        return [p for p in pods if p.name not in dropped]
    mean = have / len(cpu_only)
    out = list(pods)
    out.extend(_copies(cpu_only, rng, max(0, math.ceil((want - have) / mean)), 0))
    return out


def _share(pods: list[PodRecord], target: float, rng: np.random.Generator) -> list[PodRecord]:
    """As many GPU pods as default, each drawn as a sharing pod with the probability that makes sharing pods
    `target` of the expected GPU demand; CPU-only pods kept."""
    sharing = [p for p in pods if p.is_sharing]
    other = [p for p in pods if p.num_gpu > 0 and not p.is_sharing]
    ms = float(np.mean([gpu_demand(p) for p in sharing]))
    mo = float(np.mean([gpu_demand(p) for p in other]))
    # p * ms / (p * ms + (1 - p) * mo) = target
    chance = target * mo / (ms * (1 - target) + target * mo)
    out: list[PodRecord] = []
    tag = 0
    for pod in pods:
        if pod.num_gpu == 0:
            out.append(pod)
            continue
        pool = sharing if rng.random() < chance else other
        out.extend(_copies(pool, rng, 1, tag))
        tag += 1
    return out


def _multigpu(pods: list[PodRecord], target: float, rng: np.random.Generator) -> list[PodRecord]:
    multi = [p for p in pods if p.num_gpu > 1]
    out = list(pods)
    total = sum(gpu_demand(p) for p in pods)
    ours = sum(gpu_demand(p) for p in multi)
    tag = 0
    while ours < target * total:
        pod = _copies(multi, rng, 1, tag)[0]
        out.append(pod)
        tag += 1
        ours += gpu_demand(pod)
        total += gpu_demand(pod)
    return out


def _specs(trace_dir: Path | None, nodes: Sequence[NodeRecord], rng: np.random.Generator) -> list[tuple[str, ...]]:
    """GPU-model restrictions to draw from: those of the trace's gpuspec variants, else subsets of the models."""
    if trace_dir is not None:
        for name in ("gpuspec25", "gpuspec20", "gpuspec10", "gpuspec05"):
            path = pod_list_path(trace_dir, name)
            if path.is_file():
                return [p.gpu_spec for p in read_pods(path) if p.gpu_spec]
    models = sorted({n.model for n in nodes if n.model})
    return [tuple(m for m in models if rng.random() < 0.5) or (models[0],) for _ in range(64)]


def _spec(
    pods: list[PodRecord], nodes: Sequence[NodeRecord], target: float, rng: np.random.Generator, trace_dir: Path | None
) -> list[PodRecord]:
    specs = _specs(trace_dir, nodes, rng)
    gpu = [i for i, p in enumerate(pods) if p.num_gpu > 0 and not p.gpu_spec]
    already = sum(1 for p in pods if p.num_gpu > 0 and p.gpu_spec)
    wanted = max(0, round(target * (len(gpu) + already)) - already)
    chosen = rng.choice(len(gpu), size=min(wanted, len(gpu)), replace=False)
    out = list(pods)
    for i in chosen:
        index = gpu[int(i)]
        out[index] = replace(out[index], gpu_spec=specs[int(rng.integers(0, len(specs)))])
    return out


def generate(
    pods: Sequence[PodRecord],
    nodes: Sequence[NodeRecord],
    stress: Stress,
    trace_dir: Path | None = None,
) -> list[PodRecord]:
    """`pods` (the default list) with `stress.axis` moved to `stress.level`."""
    if not 0 <= stress.level < 1 and stress.axis != "cpu":
        raise ValueError(f"{stress.axis} level {stress.level}: a fraction in [0, 1)")
    if stress.level < 0:
        raise ValueError(f"cpu level {stress.level}: a fraction of the GPU nodes' CPU, not negative")
    rng = np.random.default_rng(stress.seed)
    base = list(pods)
    if stress.axis == "cpu":
        return _cpu(base, nodes, stress.level, rng)
    if stress.axis == "share":
        return _share(base, stress.level, rng)
    if stress.axis == "multigpu":
        return _multigpu(base, stress.level, rng)
    return _spec(base, nodes, stress.level, rng, trace_dir)
