"""The PromQL `gpupack.report.prometheus` sends: pure functions of the window, the metric and the thresholds.

Every query aggregates where the samples are, so what comes back is a number per series or per node-hour, never
samples. What each costs decided its shape (Prometheus 2.42, a week of 500 nodes at 1 min, one core):

- Any query reading a signal over the window decodes all its samples once, about 14 M samples/s: 3.5 s for
  one signal of 4,800 GPUs. So each query reads as few signals as it can, and no signal is read only to be
  thrown away (`fallback`). A range function over the window (`avg_over_time(X[7d])`) is counted against
  `--query.max-samples` one series at a time: no more of that limit at 10,000 GPUs than at 10.
- Anything evaluated per step (a subquery's or a range query's) costs about 1 us per series and operation at
  every step: the held-idle condition over 480 GPUs on a 60 s grid took 28 s. Only held-idle, which must be
  decided sample by sample (memory held while compute is idle at the same moment), is a subquery, per series
  (no grouping, no relabelling), on a grid the caller widens with the cluster (`gpupack.report.prometheus.held_step`);
  the hourly heatmap groups as early as it can, since its 168 steps a week each see every series.
- Per-series numbers come back with the series' labels, and the GPU's number is combined from its series in
  Python (a pod change starts a new series; `gpupack.core.dcgm.node_of` names the node, so an exporter upgraded past
  dcgm-exporter #655 in the window, `Hostname` then `hostname`, stays one node).

kube-scheduler's preemption counters (`scheduler_increase`) are read the same way: one number per scheduler.

Windows are half open, [start, end): instant queries are evaluated 1 ms before the end (Prometheus 2's range
selectors include both ends, Prometheus 3's only the last; a millisecond earlier both read [start, end)), and the
hourly query shifts its selectors back 1 ms for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE, HOST_LABELS, INSTANCE, fold_promql
from gpupack.report.usage import UtilizationMetric

WHOLE_UTIL = f'{GPU_UTIL}{{{INSTANCE}=""}}'
"""GPU_UTIL of whole GPUs (DCGM writes none for MIG instances; a series with `GPU_I_ID` would not be one)."""
WHOLE_ENGINE = f'{GR_ENGINE_ACTIVE}{{{INSTANCE}=""}}'
MIG_ENGINE = f'{GR_ENGINE_ACTIVE}{{{INSTANCE}!=""}}'
FINITE = " > -Inf < Inf"
"""Appended to an instant vector: keeps the samples that are numbers (NaN compares false with everything)."""


PREEMPTION_ATTEMPTS = "scheduler_preemption_attempts_total"
"""kube-scheduler's counter of preemption attempts (v1.36 `pkg/scheduler/metrics/metrics.go`, STABLE): one per
PostFilter run of the default preemption plugin, whether or not it found victims. No labels of its own."""
PREEMPTION_VICTIMS = "scheduler_preemption_victims"
"""kube-scheduler's histogram of the victims each preemption chose (same file, STABLE; buckets 1, 2, 4 ... 64): its
`_count` is the preemptions that went ahead, its `_sum` the pods they took. No labels of its own: it names no pod."""
SCHEDULER_LABEL = "job"
"""The scrape job: the only label that tells two schedulers (the default one and gpupack's) apart."""


def duration(seconds: float) -> str:
    """A PromQL duration, to the millisecond (`604800000ms`)."""
    return f"{max(1, round(seconds * 1000))}ms"


def number(value: float) -> str:
    """A float as PromQL reads it back exactly."""
    return repr(float(value))


def over_window(function: str, selector: str, window_seconds: float) -> str:
    """Per series, `<function>` of its raw samples in the window (`avg_over_time`, `max_over_time`, ...)."""
    return f"{function}({selector}[{duration(window_seconds)}])"


def p95(window_seconds: float) -> str:
    """Per whole-GPU series, the 95th percentile of its GPU_UTIL samples (linear between ranks)."""
    return f"quantile_over_time(0.95, {WHOLE_UTIL}[{duration(window_seconds)}])"


def held_idle(
    window_seconds: float,
    step: float,
    metric: UtilizationMetric,
    held_memory: float,
    held_compute: float,
    fallback: bool = True,
) -> str:
    """Per series, the fraction of the `step` grid's points (those with a framebuffer sample) at which the
    framebuffer is at least `held_memory` used while compute is under `held_compute` percent. Compute is
    GPU_UTIL, and MIG instances' engine activity (they have no GPU_UTIL); under `engine-active`, engine activity.
    When `fallback` (a whole GPU was seen with only one of the two) the other stands in for whole GPUs without
    the first; otherwise it is not read at all, a full read of a signal saved.

    Filters, not `bool` arithmetic: each operation costs at every point of the grid, and used / (used + free)
    >= h is used >= free * h / (1 - h), one operation at the default h = 0.5. A series with no point held is
    missing from the answer (its fraction is 0); a NaN sample compares false: its point counts as not held.
    """
    if held_memory <= 0:
        memory = f"{FB_USED} > -Inf"
    elif held_memory >= 1:
        memory = f"{FB_USED} >= {FB_USED} + {FB_FREE}"
    else:
        ratio = held_memory / (1 - held_memory)
        memory = f"{FB_USED} >= {FB_FREE}" + ("" if ratio == 1 else f" * {number(ratio)}")
    util = f"{WHOLE_UTIL} < {number(held_compute)}"
    engine = f"{MIG_ENGINE} < {number(held_compute / 100)}"
    if metric == "gpu-util":
        other = f"({GR_ENGINE_ACTIVE} < {number(held_compute / 100)} unless {WHOLE_UTIL})" if fallback else engine
        idle = f"{util} or {other}"
    else:
        idle = f"{GR_ENGINE_ACTIVE} < {number(held_compute / 100)}"
        if fallback:
            idle += f" or ({util} unless {GR_ENGINE_ACTIVE})"
    grid = f"[{duration(window_seconds)}:{duration(step)}]"
    return f"count_over_time(({memory} and ({idle})){grid}) / count_over_time({FB_USED}{grid})"


def _hour_mean(selector: str, by: str) -> str:
    """Per `by`, the mean of its series' means over the hour before each point (two series of one device in the
    same hour, a pod change, count alike)."""
    return f"avg by ({by}) (avg_over_time({selector}[1h] offset 1ms))"


def hourly(metric: UtilizationMetric, node_label: str | None, profiles: Iterable[str], fallback: bool = True) -> str:
    """Per node and hour, the mean over its GPUs of their utilization under `metric`, percent: a whole GPU's
    GPU_UTIL or engine activity (the other standing in where it is missing, when `fallback`: a whole GPU was seen
    with one and not the other), a MIG GPU's instances of `profiles` folded by `gpupack.core.dcgm.fold_promql`.
    A GPU reported whole as well keeps the whole number, as `gpupack.report.usage.fold_mig` does. A GPU-hour that is
    not a number (a NaN sample) is left out.

    Rows are per `node_label`, or per (`Hostname`, `hostname`): `node_of` picks the node from them, and a node
    whose exporter switched labels in the window has two rows to merge."""
    node = node_label or ", ".join(HOST_LABELS)
    gpu = f"{node}, gpu"
    util = _hour_mean(WHOLE_UTIL, gpu)
    engine = f"{_hour_mean(WHOLE_ENGINE, gpu)} * 100"
    first, second = (util, engine) if metric == "gpu-util" else (engine, util)
    per_gpu = f"({first}) or ({second})" if fallback else f"({first})"
    fold = fold_promql(
        lambda matcher: _hour_mean(f"{GR_ENGINE_ACTIVE}{{{matcher}}}", f"{gpu}, {INSTANCE}"), gpu, profiles, " * 100"
    )
    if fold:
        per_gpu = f"{per_gpu} or ({fold})"
    return f"avg by ({node}) (clamp(({per_gpu}){FINITE}, 0, 100))"


def scheduler_increase(counter: str, window_seconds: float) -> str:
    """Per scrape job, what a kube-scheduler counter (`PREEMPTION_ATTEMPTS`, or `PREEMPTION_VICTIMS`' `_sum` or
    `_count`) grew by over the window, its instances summed (only the leader schedules; a restart resets the
    counter, which `increase` counts from zero). `increase` extrapolates to the window's edges: about a count."""
    return f"sum by ({SCHEDULER_LABEL}) (increase({counter}[{duration(window_seconds)}]))"
