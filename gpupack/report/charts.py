"""The HTML page's two pictures as PNG bytes: per-node utilization hour by hour, and how the nodes' mean
utilization is distributed against the guide's (docs/method.md) thresholds.

Drawn on a bare `Figure` with the Agg canvas, not pyplot: no display, no backend switch and no global figure
state, so rendering a report never changes how the rest of the process plots. Text is drawn literally
(`text.parse_math` off), because a `$` in a node name would otherwise be read as mathtext.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from gpupack.report.document import Report
from gpupack.report.present import CLASS_COLOURS, nodes_by_waste

DPI = 100
"""Sharp on a screen, small enough inline: the two PNGs of a 40-node week are about 100 kB together."""
WIDTH = 12.0
"""Inches: 1200 px, the page's content width."""
ROW_INCHES = 0.2
"""Height of one node's row in the heatmap: room for an 8-point name."""
MAX_LABELLED_ROWS = 150
"""Beyond this many nodes only every k-th name is written (the figure would otherwise be metres tall)."""
TICK_STEPS_HOURS = (1, 2, 3, 6, 12, 24, 48, 168)


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=DPI, metadata={"Software": None})
    return out.getvalue()


def heatmap_rows(report: Report) -> list[str]:
    """The nodes with hourly data, in the nodes table's order (most idle first), then any others by name."""
    ordered = [row.usage.node for row in nodes_by_waste(report) if row.usage.node in report.hourly]
    return ordered + sorted(set(report.hourly) - set(ordered))


def time_ticks(start: float, hours: int) -> tuple[list[float], list[str]]:
    """Positions (in hour cells, cell i centred on i) and UTC labels of round times: at most about 12 ticks, on
    whole hours, days at midnight; dates alone once a tick is a day or more apart."""
    step = next((s for s in TICK_STEPS_HOURS if hours / s <= 12), TICK_STEPS_HOURS[-1])
    first = -(-start // (step * 3600)) * step * 3600  # the first round instant at or after the start
    if step == 168:  # weeks on Mondays (the epoch began on a Thursday)
        first += ((7 - datetime.fromtimestamp(first, UTC).weekday()) % 7) * 86400
    positions, labels = [], []
    instant = first
    while instant <= start + hours * 3600:
        when = datetime.fromtimestamp(instant, UTC)
        positions.append((instant - start) / 3600 - 0.5)
        labels.append(when.strftime("%Y-%m-%d" if step >= 24 else "%m-%d %H:%M"))
        instant += step * 3600
    return positions, labels


def heatmap_png(report: Report) -> bytes | None:
    """Nodes x hours, each cell the hour's mean utilization on a fixed 0-100 % scale (grey: no data). None when
    there is no hourly number at all, and the page says so instead."""
    names = heatmap_rows(report)
    width = max((len(report.hourly[n]) for n in names), default=0)
    cells = np.full((len(names), width), np.nan)
    for i, name in enumerate(names):
        for j, value in enumerate(report.hourly[name]):
            if value is not None:
                cells[i, j] = value
    if not names or np.isnan(cells).all():
        return None
    with matplotlib.rc_context({"text.parse_math": False}):
        figure = Figure(figsize=(WIDTH, 1.6 + ROW_INCHES * min(len(names), MAX_LABELLED_ROWS)), dpi=DPI)
        axes = figure.add_subplot()
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d5d8dc")
        image = axes.imshow(
            np.ma.masked_invalid(cells), aspect="auto", cmap=cmap, vmin=0, vmax=100, interpolation="nearest"
        )
        every = max(1, -(-len(names) // MAX_LABELLED_ROWS))
        axes.set_yticks(range(0, len(names), every), labels=names[::every], fontsize=8)
        positions, labels = time_ticks(report.window.start, width)
        axes.set_xticks(positions, labels=labels, fontsize=8, rotation=30, ha="right")
        axes.set_xlabel("hour of the window (UTC)")
        t = report.thresholds
        bar = figure.colorbar(image, ax=axes, pad=0.01, fraction=0.03)
        bar.set_ticks([0, t.idle, t.underused, 50, t.hot, 100])
        bar.set_label("hourly mean utilization, %")
        figure.tight_layout()
        return _png(figure)


def distribution_png(report: Report) -> bytes | None:
    """How many nodes sit at each mean utilization (5 % bins, stacked by class), with the idle, underused and
    hot thresholds drawn and named. None when no node has a utilization."""
    known = [(row.usage.util_mean, row.node_class) for row in report.nodes if row.usage.util_mean is not None]
    if not known:
        return None
    edges = np.arange(0.0, 105.0, 5.0)
    centres = (edges[:-1] + edges[1:]) / 2
    t = report.thresholds
    with matplotlib.rc_context({"text.parse_math": False}):
        figure = Figure(figsize=(WIDTH, 4.2), dpi=DPI)
        axes = figure.add_subplot()
        bottom = np.zeros(len(centres))
        for klass, colour in CLASS_COLOURS.items():
            values = [util for util, node_class in known if node_class == klass]
            if not values:
                continue
            counts, _ = np.histogram(values, bins=edges)
            axes.bar(centres, counts, width=4.6, bottom=bottom, color=colour, label=f"{klass} ({len(values)})")
            bottom += counts
        for value, name in ((t.idle, "idle"), (t.underused, "underused"), (t.hot, "hot")):
            axes.axvline(value, color="#2c3e50", linestyle="--", linewidth=1)
            axes.annotate(
                f"{name} {'over' if name == 'hot' else 'under'} {value:g} %",
                xy=(value, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -4),
                textcoords="offset points",
                va="top",
                fontsize=9,
            )
        unknown = len(report.nodes) - len(known)
        title = f"{len(known)} nodes" + (f"; {unknown} without a number, not shown" if unknown else "")
        axes.set_title(title, loc="left", fontsize=10)
        axes.set_xlim(0, 100)
        axes.set_ylim(0, max(float(bottom.max()), 1.0) * 1.25)
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("node mean GPU utilization over the window, %")
        axes.set_ylabel("nodes")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, title="class (nodes)")
        axes.grid(axis="y", alpha=0.3)
        figure.tight_layout()
        return _png(figure)
