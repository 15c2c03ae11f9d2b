"""`gpupack report` in the terminal: rich panels and tables in the order `gpupack.report.present` decides, and the
progress bar shown while the sources are queried.

Every string from the cluster (node, pod and workload names, actions) goes in as `rich.text.Text`, never as
markup, so a pod named `x[/red]` prints as written instead of restyling or breaking the output.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gpupack.report.document import Comparison, Finding, Report, Savings
from gpupack.report.present import (
    CLASS_COLOURS,
    NUMERIC_HEADERS,
    SEVERITY_COLOURS,
    compare_rows,
    concerns,
    evidence_items,
    findings_by_weight,
    node_cells,
    node_headers,
    nodes_by_waste,
    savings_rows,
    summary_rows,
    verdict_line,
)
from gpupack.report.sources import Progress as SourceProgress


def render(report: Report, console: Console) -> None:
    """Print the summary, the nodes (most idle first), the findings (most severe, then most money first), and
    the savings and before/after when the report has them."""
    console.print(_summary(report))
    console.print(_nodes(report))
    console.print(_findings(report.findings))
    if report.savings is not None:
        console.print(_savings(report.savings, report.summary.currency))
    if report.compare is not None:
        console.print(_compare(report.compare))


def _grid(rows: list[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, value in rows:
        grid.add_row(Text(label), Text(value))
    return grid


def _summary(report: Report) -> Panel:
    parts: list[RenderableType] = [_grid(summary_rows(report))]
    if report.summary.advice:
        parts += [Text(""), Text(report.summary.advice, style="bold")]
    return Panel(Group(*parts), title="gpupack report", title_align="left", expand=False)


def _nodes(report: Report) -> RenderableType:
    if not report.nodes:
        return Text("No GPU nodes in the window.")
    headers = node_headers(report)
    table = Table(title="GPU nodes, most idle first", title_justify="left")
    for header in headers:
        table.add_column(header, justify="right" if header in NUMERIC_HEADERS else "left", overflow="fold")
    klass = headers.index("class")
    for row in nodes_by_waste(report):
        cells = [Text(cell) for cell in node_cells(report, row)]
        cells[klass].stylize(CLASS_COLOURS[row.node_class])
        table.add_row(*cells)
    return table


def _findings(findings: tuple[Finding, ...]) -> RenderableType:
    if not findings:
        return Text("No findings.")
    table = Table(title="Findings, most severe and most costly first", title_justify="left", show_lines=True)
    table.add_column("severity", no_wrap=True)
    for header in ("kind", "concerns", "evidence", "action"):
        table.add_column(header, overflow="fold")  # folded, never cut by an ellipsis: half a label is unusable
    for f in findings_by_weight(findings):
        table.add_row(
            Text(f.severity, style=SEVERITY_COLOURS[f.severity]),
            Text(f.kind),
            Text("\n".join(concerns(f))),
            Text("\n".join(evidence_items(f.evidence))),
            Text(f.action),
        )
    return table


def _savings(savings: Savings, currency: str | None) -> Panel:
    return Panel(_grid(savings_rows(savings, currency)), title="Savings with gpupack", title_align="left", expand=False)


def _compare(c: Comparison) -> Panel:
    table = Table(box=None, pad_edge=False)
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for label, before, after in compare_rows(c):
        table.add_row(Text(label, style="bold"), Text(before), Text(after))
    verdict = Text(verdict_line(c), style="bold " + CLASS_COLOURS["ok" if c.effective else "idle"])
    return Panel(Group(table, Text(""), verdict), title="Before and after", title_align="left", expand=False)


def _no_progress(what: str, done: int, total: int) -> None:
    """Where no bar is drawn: output that is not a terminal, or `--json`."""


@contextmanager
def query_progress(console: Console, *, json_output: bool = False) -> Iterator[SourceProgress]:
    """A `gpupack.report.sources.Progress` callback drawing one bar on `console` while the `with` block runs (pass the
    standard error console, so standard output holds only the report), or a no-op when `console` is not a
    terminal or the output is JSON. The bar is transient and refreshed on each call, with no refresh thread,
    so it leaves nothing behind and draws exactly what the source reported."""
    if json_output or not console.is_terminal:
        yield _no_progress
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, auto_refresh=False) as bar:
        task: TaskID | None = None

        def update(what: str, done: int, total: int) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task(what, total=total)
            bar.update(task, description=what, completed=done, total=total)
            bar.refresh()

        yield update
