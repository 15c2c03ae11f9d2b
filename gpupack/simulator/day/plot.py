"""The synthetic day drawn: GPUs in use, their mean utilization and the GPU nodes needed, one line per run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpupack.simulator.day.metrics import WITHOUT, DayResult, label

COLOURS = {WITHOUT: "tab:red", "spread": "tab:orange", "gpupack": "tab:blue", "binpack": "tab:green"}


def _smooth(values: list[float], width: int) -> list[float]:
    """A centred moving average: per-minute utilization jumps with every bind and would hide the trend."""
    if width <= 1:
        return values
    half = width // 2
    out = []
    for i in range(len(values)):
        window = values[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def plot_day(results: Mapping[str, DayResult], path: Path) -> None:
    """Three stacked panels over the day, saved as PNG (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (gpus, util, nodes) = plt.subplots(3, 1, figsize=(9, 9), dpi=110, sharex=True)
    first = next(iter(results.values()))
    width = max(1, round(15 / first.step_minutes))
    for run, result in results.items():
        colour, name = COLOURS.get(run), label(run)
        summary = result.summary()
        gpus.plot(
            result.hours,
            result.gpus_in_use,
            color=colour,
            linewidth=1.4,
            label=f"{name}: {summary['gpu_hours']:.0f} GPU-hours",
        )
        util.plot(
            result.hours,
            [100 * u for u in _smooth(result.utilization_curve(), width)],
            color=colour,
            linewidth=1.4,
            label=f"{name}: {summary['mean_utilization_pct']:.0f}% over the day",
        )
        nodes.plot(
            result.hours,
            result.gpu_nodes,
            color=colour,
            linewidth=1.4,
            drawstyle="steps-post",
            label=f"{name}: peak {summary['gpu_nodes_peak']}, mean {summary['gpu_nodes_mean']:.1f}, "
            f"{summary['removable_node_hours']:.0f} removable node-hours",
        )
    gpus.axhline(first.gpus, color="grey", linewidth=0.8, linestyle=":", label=f"cluster: {first.gpus} GPUs")
    nodes.axhline(first.nodes, color="grey", linewidth=0.8, linestyle=":", label=f"cluster: {first.nodes} nodes")
    gpus.set_ylabel("GPUs in use")
    util.set_ylabel("utilization of GPUs in use, %")
    nodes.set_ylabel("GPU nodes in use")
    nodes.set_xlabel("hour of the day")
    runs = "without gpupack and under each extender scoring policy" if WITHOUT in results else "under each policy"
    gpus.set_title(f"{first.scenario}: the same day {runs}")
    util.set_title(f"mean utilization of the GPUs in use ({width * first.step_minutes:g}-minute moving average)")
    util.set_ylim(0, 100)
    gpus.set_ylim(bottom=0)
    nodes.set_ylim(bottom=0)
    nodes.set_xlim(0, max(first.hours[-1] + first.step_minutes / 60, 1e-9))
    nodes.set_xticks(range(0, int(first.hours[-1]) + 2, 2 if first.hours[-1] > 8 else 1))
    for axis in (gpus, util, nodes):
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
