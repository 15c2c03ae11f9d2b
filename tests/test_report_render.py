"""The report's renderers: the terminal (rich), the self-contained HTML page and its charts, and the page as
headless Chromium draws it. Reports are built by hand in `tests.report_kit`."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from html import escape
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console

from gpupack.report.charts import distribution_png, heatmap_png, time_ticks
from gpupack.report.document import Finding
from gpupack.report.present import CLASS_COLOURS, findings_by_weight, node_idle_gpu_hours
from gpupack.report.render_html import render_html
from gpupack.report.render_text import query_progress, render
from tests.browser import screenshot
from tests.report_kit import (
    ADVICE,
    HOSTILE_POD,
    HOURS,
    ORDER_BY_COST,
    ORDER_BY_GPU_HOURS,
    SOURCE,
    START,
    make_report,
    make_row,
)

FINDINGS_ORDER = [
    ("high", "idle-node", "node a100-idle-1"),
    ("high", "idle-node", "node t4-idle-2"),
    ("medium", "oversized-workload", "pod ml/embedder-7f9c"),
    ("medium", "memory-held-idle", "node t4-under-1"),
    ("low", "hot-node", "node h100-hot-1"),
    ("info", "no-gpu-metrics", "node t4-dark-3"),
]
SECTIONS = {
    "summary": "Summary",
    "heatmap": "Utilization per node, hour by hour",
    "distribution": "Distribution of node utilization",
    "findings": "Findings, most severe and most costly first",
    "nodes": "GPU nodes, most idle first",
    "savings": "Savings with gpupack",
    "compare": "Before and after",
}
DATA_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def text_of(report, width: int = 200, **console: object) -> str:
    out = Console(record=True, width=width, file=io.StringIO(), **console)  # type: ignore[arg-type]
    render(report, out)
    return out.export_text()


def first_cells(text: str, after: str, before: str) -> list[list[str]]:
    """The cells of each body line of the table between two titles, for the rows whose first cell is filled."""
    block = text.split(after, 1)[1].split(before, 1)[0]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in block.splitlines() if line.startswith("│")]
    return [row for row in rows if row and row[0]]


def section(page: str, ident: str) -> str:
    return page.split(f'<section id="{ident}">', 1)[1].split("</section>", 1)[0]


# -- terminal --------------------------------------------------------------------------------------------------


def test_summary_speaks_the_guides_numbers_and_the_advice() -> None:
    text = text_of(make_report(priced=True))
    for line in (
        "2026-11-23T00:00:00Z .. 2026-11-30T00:00:00Z (168 h)",
        SOURCE,
        "mean GPU utilization              26.5 %",
        "GPUs                              21",
        "nodes idle (under 10 %)           2",
        "nodes under 30 % (idle included)  3",
        "nodes hot (over 85 %)             1",
        "idle GPU-hours                    2,347.0 (USD 5,899.32)",
        ADVICE,
    ):
        assert line in text


def test_nodes_are_most_idle_gpu_hours_first_without_prices() -> None:
    text = text_of(make_report())
    rows = first_cells(text, "GPU nodes, most idle first", "Findings")
    assert [row[0].removesuffix(" (spot)") for row in rows] == ORDER_BY_GPU_HOURS
    assert rows[0][-1] == "1,303.7"  # 8 GPUs x 168 h x (1 - 3 %)
    assert "idle cost" not in text and "USD" not in text


def test_nodes_are_most_idle_cost_first_when_priced() -> None:
    text = text_of(make_report(priced=True))
    rows = first_cells(text, "GPU nodes, most idle first", "Findings")
    assert [row[0].removesuffix(" (spot)") for row in rows] == ORDER_BY_COST
    assert "idle cost" in text and rows[0][-1] == "USD 3,911.04"  # 1,303.68 GPU-hours at 3 a GPU-hour


def test_node_class_words_are_printed_and_coloured() -> None:
    rows = {row[0]: row for row in first_cells(text_of(make_report()), "GPU nodes, most idle first", "Findings")}
    classes = {name: row[6] for name, row in rows.items()}
    assert classes == {
        "a100-idle-1": "idle",
        "t4-under-1": "underused",
        "h100-ok-1": "ok",
        "h100-hot-1 (spot)": "hot",
        "t4-idle-2": "idle",
        "t4-dark-3": "unknown",
    }
    out = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="truecolor")
    render(make_report(), out)
    assert "\x1b[38;2;192;57;43midle" in out.file.getvalue()  # type: ignore[attr-defined]


def test_findings_are_most_severe_then_most_money_first() -> None:
    rows = first_cells(text_of(make_report()), "Findings, most severe", "Savings")
    assert [(r[0], r[1], r[2]) for r in rows] == FINDINGS_ORDER


def test_findings_without_money_are_ordered_by_idle_gpu_hours() -> None:
    few = Finding("idle-gpu", "medium", "a", node="n1", evidence={"idle_gpu_hours": 10.0})
    many = Finding("idle-gpu", "medium", "b", node="n2", evidence={"idle_gpu_hours": 20.0})
    none = Finding("a-kind-sorting-first", "medium", "c", node="n0", evidence={"reason": "text"})
    severe = Finding("z-last-kind", "high", "d", evidence={"idle_gpu_hours": 1.0})
    assert findings_by_weight([none, few, many, severe]) == [severe, many, few, none]


def test_savings_and_before_after_are_printed_with_the_verdict() -> None:
    text = text_of(make_report(priced=True))
    for label, value in (
        ("removable nodes", "a100-idle-1, t4-idle-2, t4-under-1"),
        ("removable GPU-hours", "2,184.0 (USD 4,149.60)"),
        ("utilization of GPUs in use after", "61.5 % (2 pods unmeasured, counted idle)"),
        ("over capacity after (no saving)", "t4-busy-1"),
        ("pods the replay could not place", "ml/huge-train-0"),
    ):
        assert re.search(rf"{re.escape(label)} +{re.escape(value)}", text), label
    for expected in ("4.7621", "2.9411", "effective: GPU-hours per busy GPU-hour fell from 4.76 to 2.94."):
        assert expected in text
    report = make_report()
    worse = replace(report, compare=replace(report.compare, effective=False, verdict="no change"))
    assert "not effective: no change" in text_of(worse)


def test_cluster_strings_are_printed_as_written_never_as_markup() -> None:
    text = text_of(make_report(pod="ml/x[/red][bold]y"))
    assert "ml/x[/red][bold]y" in text and HOSTILE_POD not in text


def test_a_narrow_terminal_folds_cells_and_cuts_nothing() -> None:
    text = text_of(make_report(), width=90)
    assert "…" not in text and "303.68" in text  # idle_gpu_hours=1303.68, folded


def test_a_report_with_nothing_optional_still_prints() -> None:
    report = replace(make_report(), nodes=(), findings=(), hourly={}, savings=None, compare=None)
    text = text_of(report, width=120)
    assert "No GPU nodes in the window." in text and "No findings." in text
    assert "Savings" not in text and "Before and after" not in text


def test_progress_is_a_no_op_off_a_terminal_and_for_json() -> None:
    plain = Console(file=io.StringIO())
    terminal = Console(file=io.StringIO(), force_terminal=True)
    for console, json_output in ((plain, False), (terminal, True)):
        with query_progress(console, json_output=json_output) as progress:
            progress("querying DCGM_FI_DEV_GPU_UTIL", 3, 8)
        assert console.file.getvalue() == ""  # type: ignore[attr-defined]


def test_progress_draws_what_the_source_reports_on_a_terminal() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with query_progress(console) as progress:
        progress("querying DCGM_FI_DEV_GPU_UTIL", 3, 8)
        progress("querying hourly means", 8, 8)
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "querying DCGM_FI_DEV_GPU_UTIL" in drawn and "3/8" in drawn
    assert "querying hourly means" in drawn and "8/8" in drawn


# -- HTML ------------------------------------------------------------------------------------------------------


def test_page_holds_every_section_and_the_numbers() -> None:
    page = render_html(make_report(priced=True))
    for ident, title in SECTIONS.items():
        assert f'<section id="{ident}"><h2>{escape(title)}</h2>' in page
    for number in ("26.5 %", "2,347.0 (USD 5,899.32)", escape(ADVICE), "2,184.0 (USD 4,149.60)", "4.7621", "2.9411"):
        assert number in page
    assert "effective: GPU-hours per busy GPU-hour fell" in section(page, "compare")
    assert len(DATA_PNG.findall(page)) == 2


def test_page_tables_keep_the_terminals_orders() -> None:
    page = render_html(make_report(priced=True))
    names = re.findall(r"<tr><td>([^<]*)</td>", section(page, "nodes"))
    assert [n.removesuffix(" (spot)") for n in names] == ORDER_BY_COST
    kinds = re.findall(r'<tr><td class="k">([^<]*)</td>', section(page, "findings"))
    assert kinds == [kind for _, kind, _ in FINDINGS_ORDER]
    assert "util_mean=3</li>" in section(page, "findings")


def test_page_escapes_every_cluster_string() -> None:
    hostile = Finding(
        "kind<i>",
        "high",
        "run <img src=x onerror=alert(1)>",
        node="node<b>",
        gpu="<g>",
        pod=HOSTILE_POD,
        workload="Deployment <w>",
        evidence={"why": "<e>"},
    )
    report = make_report()
    row = make_row("<node>&", "A100", 1, 5.0, 5.0, 0.1, False)
    page = render_html(
        replace(report, findings=(hostile,), source="<src>", nodes=(row,), hourly={"<node>&": row.usage.hourly})
    )
    for raw in ("<script", "<i>", "<b>", "<g>", "<w>", "<e>", "<src>", "<node>", "onerror=alert(1)>"):
        assert raw not in page
    assert escape(HOSTILE_POD) in page and "&lt;node&gt;&amp;" in page
    assert page.count("<img") == 2


def test_page_loads_nothing_from_anywhere() -> None:
    page = render_html(make_report())
    sources = re.findall(r"\bsrc\s*=\s*[\"']?([^\"'\s>]*)", page)
    assert len(sources) == 2 and all(s.startswith("data:image/png;base64,") for s in sources)
    for reference in ("href", "url(", "@import", "<link", "<script", "<iframe", "<object", "<embed", "srcset"):
        assert reference not in page.lower()
    text = DATA_PNG.sub("", page).replace(escape(SOURCE), "")  # the source's address is shown, as text
    for reference in ("http:", "https:", "//"):
        assert reference not in text
    assert "default-src 'none'" in page


def test_page_without_hourly_data_findings_savings_or_compare_says_so() -> None:
    report = replace(make_report(), findings=(), hourly={}, savings=None, compare=None)
    page = render_html(report)
    assert "No hourly data for this window." in section(page, "heatmap")
    assert "No findings." in section(page, "findings")
    assert "Not computed" in section(page, "savings") and "No comparison" in section(page, "compare")
    assert "<img" in section(page, "distribution") and "<img" not in section(page, "heatmap")
    empty = render_html(replace(report, nodes=(), hourly={"n1": (None, None)}))
    assert "holds no number" in section(empty, "heatmap") and "No node had a number." in empty
    assert "<img" not in empty


def png_size(data: bytes) -> tuple[int, int]:
    """(height, width) of a PNG, read by matplotlib (no new dependency)."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    shape = imread(io.BytesIO(data)).shape
    return shape[0], shape[1]


def test_charts_are_small_pngs_at_the_page_width() -> None:
    report = make_report()
    heat, dist = heatmap_png(report), distribution_png(report)
    assert heat is not None and dist is not None
    assert png_size(heat) == (280, 1200)  # 1.6 in + 6 rows x 0.2 in at 100 dpi
    assert png_size(dist)[1] == 1200
    assert len(heat) < 150_000 and len(dist) < 100_000


def test_a_large_cluster_heatmap_stays_bounded() -> None:
    rows = tuple(make_row(f"node-{i:03}", "T4", 1, float(i % 100), None, None, False) for i in range(400))
    report = replace(make_report(), nodes=rows, hourly={r.usage.node: r.usage.hourly for r in rows})
    heat = heatmap_png(report)
    assert heat is not None and png_size(heat) == (3160, 1200)  # 150 labelled rows' height


def test_chart_text_is_drawn_literally() -> None:
    """A `$` in a node name is not mathtext: this name would make matplotlib's parser raise."""
    row = make_row("gpu$\\nosuchcommand{$", "T4", 1, 5.0, 5.0, 0.1, False)
    report = replace(make_report(), nodes=(row,), hourly={row.usage.node: row.usage.hourly})
    assert heatmap_png(report) is not None
    assert matplotlib.rcParams["text.parse_math"] is True


def test_a_weeks_hour_ticks_are_utc_midnights() -> None:
    positions, labels = time_ticks(START, HOURS)
    assert labels == [f"2026-11-{day}" for day in range(23, 31)]
    assert positions == [24.0 * day - 0.5 for day in range(8)]  # cell i is centred on i: hour 0 starts at -0.5


def test_a_day_from_an_odd_minute_ticks_every_two_hours_on_the_hour() -> None:
    positions, labels = time_ticks(START + 10 * 3600 + 37 * 60, 24)
    assert labels[:2] == ["11-23 12:00", "11-23 14:00"] and len(labels) == 12
    assert positions[0] == pytest.approx(83 / 60 - 0.5)  # 12:00 is 1 h 23 min after 10:37


def test_idle_gpu_hours_of_a_node() -> None:
    row = make_row("n", "T4", 4, 25.0, None, None, False)
    assert node_idle_gpu_hours(row, 10.0) == 30.0
    assert node_idle_gpu_hours(make_row("n", "T4", 4, None, None, None, False), 10.0) is None


# -- the page in a browser -------------------------------------------------------------------------------------

WINDOW = (1400, 2400)


@pytest.fixture(scope="module")
def chromium_view(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, str]:
    """The priced report's page opened from a file in headless Chromium: the screenshot's path and pixels (RGB,
    0-255) and the DOM after load."""
    folder = tmp_path_factory.mktemp("chromium")
    page, shot = folder / "report.html", folder / "report.png"
    page.write_text(render_html(make_report(priced=True)), encoding="utf-8")
    dom = screenshot(page.as_uri(), shot, WINDOW, folder / "profile")
    pixels = np.round(imread(shot)[:, :, :3] * 255).astype(np.int16)
    return shot, pixels, dom


def near(pixels: np.ndarray, colour: tuple[float, ...], tolerance: int) -> int:
    """How many pixels are within `tolerance` of `colour` (0-1 RGB) on every channel."""
    target = np.round(np.array(colour[:3]) * 255).astype(np.int16)
    return int((np.abs(pixels - target) <= tolerance).all(axis=2).sum())


def test_chromium_draws_the_page_at_the_window_size_and_not_blank(
    chromium_view: tuple[Path, np.ndarray, str],
) -> None:
    shot, pixels, _ = chromium_view
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    packed = (pixels[:, :, 0].astype(np.int32) << 16) | (pixels[:, :, 1].astype(np.int32) << 8) | pixels[:, :, 2]
    assert len(np.unique(packed)) > 1000


def test_chromium_draws_both_charts(chromium_view: tuple[Path, np.ndarray, str]) -> None:
    """The inline PNGs decoded and drawn: the heatmap's near-0 % and near-100 % colours and the distribution's idle
    bar are on screen (page CSS has none of these colours in large areas)."""
    _, pixels, _ = chromium_view
    viridis = matplotlib.colormaps["viridis"]
    assert near(pixels, viridis(0.02), 14) > 2000  # the idle nodes' rows
    assert near(pixels, viridis(0.97), 30) > 2000  # the hot node's row
    assert near(pixels, matplotlib.colors.to_rgb(CLASS_COLOURS["idle"]), 4) > 2000  # the idle nodes' bar


def test_chromium_dom_has_every_section_and_the_images(chromium_view: tuple[Path, np.ndarray, str]) -> None:
    _, _, dom = chromium_view
    for ident, title in SECTIONS.items():
        assert f'<section id="{ident}"><h2>{escape(title)}</h2>' in dom
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', dom)) == 2
    assert "<script" not in dom and escape(HOSTILE_POD).replace("&#x27;", "'") in dom
