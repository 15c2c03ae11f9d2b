"""What `gpupack simulate` prints and draws: a table of the report points, JSON, and the allocation curves."""

from __future__ import annotations

from pathlib import Path

from gpupack.simulator.run import Report

PUBLISHED: dict[str, dict[str, float]] = {
    # Weng et al., USENIX ATC '23, default trace, mean of 10 seeds: allocation % at 100% and 130% arrived demand.
    "random": {"100": 86.30, "130": 87.47},
    "dotproduct": {"100": 90.62, "130": 90.85},
    "bestfit": {"100": 92.86, "130": 93.08},
    "fgd": {"100": 95.23, "130": 95.39},
}


def table(report: Report, published: bool = True) -> str:
    """One row per policy: allocation %, unallocated GPUs, fragmentation ratio and idle nodes per point, with
    the published allocation beside ours on the default trace; `published=False` leaves it out (a trace other
    than the published one, under the same name)."""
    points = [str(p) for p in report.points]
    published = published and report.workload == "default"
    head = f"{'policy':<11}{'seeds':>6}"
    for p in points:
        head += f"{'alloc% @' + p:>12}{'±':>6}{'unalloc':>9}{'frag%':>7}{'idle':>6}"
    if published:
        head += f"{'published @' + '/'.join(points):>22}"
    lines = [f"trace: {report.workload}", head]
    for name, result in report.policies.items():
        row = f"{name:<11}{len(result.runs):>6}"
        for point in report.points:
            mean, spread = result.mean(point), result.spread(point)
            if not mean:
                row += f"{'-':>12}{'':>6}{'':>9}{'':>7}{'':>6}"
                continue
            row += (
                f"{mean['alloc_pct']:>12.2f}{spread['alloc_pct']:>6.2f}{mean['unallocated_gpus']:>9.0f}"
                f"{mean['frag_ratio']:>7.1f}{mean['idle_nodes']:>6.0f}"
            )
        if published and name in PUBLISHED:
            row += f"{' / '.join(f'{PUBLISHED[name][p]:.2f}' for p in points if p in PUBLISHED[name]):>22}"
        lines.append(row)
    return "\n".join(lines)


def plot(report: Report, path: Path) -> None:
    """Allocation ratio against arrived demand, one line per policy, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5), dpi=120)
    for name in report.policies:
        grid, means = report.curve(name)
        axis.plot(grid, means, label=name, linewidth=1.6)
    axis.plot([0, 100], [0, 100], color="grey", linewidth=0.8, linestyle=":", label="all arrived demand placed")
    for point in report.points:
        axis.axvline(point, color="grey", linewidth=0.6, linestyle="--")
    axis.set_xlabel("arrived GPU demand, % of cluster GPU capacity")
    axis.set_ylabel("GPU allocation, % of cluster GPUs")
    axis.set_title(f"GPU allocation as pods arrive ({report.workload} trace)")
    axis.set_xlim(0, max(report.points) + 2)
    axis.set_ylim(0, 100)
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
