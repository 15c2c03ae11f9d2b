"""`gpupack report --html FILE`: one self-contained page, to mail or attach to a ticket and open anywhere.

Nothing is fetched: the CSS is inline, the two charts are `data:` PNGs, and a Content-Security-Policy of
`default-src 'none'` makes the browser refuse any load a future edit might add. Every string that came from the
cluster or a source (names, actions, the source's address) is passed through `html.escape`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from html import escape

from gpupack.report.charts import distribution_png, heatmap_png
from gpupack.report.document import Comparison, Finding, Report, Savings
from gpupack.report.present import (
    CLASS_COLOURS,
    NONE,
    NUMERIC_HEADERS,
    SEVERITY_COLOURS,
    compare_rows,
    evidence_items,
    findings_by_weight,
    node_cells,
    node_headers,
    nodes_by_waste,
    savings_rows,
    summary_rows,
    verdict_line,
    window_text,
)

CSS = """
body { font: 14px/1.45 system-ui, "DejaVu Sans", sans-serif; color: #1c2833; margin: 0; background: #f4f6f7; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 20px 40px; }
h1 { font-size: 24px; margin: 8px 0 2px; } h2 { font-size: 18px; margin: 0 0 10px; }
section { background: #fff; border: 1px solid #d5d8dc; border-radius: 6px; padding: 14px 16px; margin: 14px 0; }
.sub, .note { color: #566573; } .advice { font-weight: bold; font-size: 16px; margin: 12px 0 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e8e8; vertical-align: top; }
th { background: #eaecee; } .n { text-align: right; font-variant-numeric: tabular-nums; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 18px; margin: 0; } dt { font-weight: bold; }
dd { margin: 0; } img { max-width: 100%; display: block; } .tag { font-weight: bold; }
ul { margin: 0; padding-left: 18px; } .good { color: #1e8449; } .bad { color: #c0392b; }
td.k { white-space: nowrap; } td li { overflow-wrap: anywhere; } td.e { min-width: 15em; }
td.w { overflow-wrap: anywhere; min-width: 8em; }
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def render_html(report: Report) -> str:
    """The whole page: summary, heatmap, distribution, findings, nodes, savings, before/after; a section whose
    data the report lacks says so rather than disappearing."""
    sections = (
        _summary(report),
        _image(
            "heatmap",
            "Utilization per node, hour by hour",
            heatmap_png(report),
            _heatmap_note(report),
            "Rows in the nodes table's order (most idle first); grey: an hour without data.",
        ),
        _image("distribution", "Distribution of node utilization", distribution_png(report), "No node had a number."),
        _findings(report.findings),
        _nodes(report),
        _savings(report.savings, report.summary.currency),
        _compare(report.compare),
    )
    title = f"gpupack report {window_text(report.window)}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body><main>"
        f'<h1>gpupack report</h1><p class="sub">{escape(window_text(report.window))}</p>\n'
        + "\n".join(sections)
        + "\n</main></body></html>\n"
    )


def _section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{body}</section>'


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows) + "</dl>"


def _tag(word: str, colour: str) -> str:
    return f'<span class="tag" style="color:{colour}">{escape(word)}</span>'


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], right: frozenset[str] = NUMERIC_HEADERS) -> str:
    """Cells are HTML already (escaped by the caller); the `right` headers align with their numbers."""
    head = "".join(f'<th class="n">{escape(h)}</th>' if h in right else f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def _summary(report: Report) -> str:
    advice = f'<p class="advice">{escape(report.summary.advice)}</p>' if report.summary.advice else ""
    return _section("summary", "Summary", _dl(summary_rows(report)) + advice)


def _heatmap_note(report: Report) -> str:
    return "No hourly data for this window." if not report.hourly else "The hourly data holds no number."


def _image(ident: str, title: str, png: bytes | None, missing: str, caption: str = "") -> str:
    if png is None:
        return _section(ident, title, _note(missing))
    data = base64.b64encode(png).decode("ascii")
    image = f'<img alt="{escape(title)}" src="data:image/png;base64,{data}">'
    return _section(ident, title, image + (_note(caption) if caption else ""))


def _findings(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return _section("findings", "Findings", _note("No findings."))
    headers = ("kind", "severity", "node", "GPU", "pod", "workload", "evidence", "action")
    rows = (
        [
            f'<td class="k">{escape(f.kind)}</td>',
            f'<td class="k">{_tag(f.severity, SEVERITY_COLOURS[f.severity])}</td>',
            *(f'<td class="k">{escape(value or NONE)}</td>' for value in (f.node, f.gpu)),
            *(f'<td class="w">{escape(value or NONE)}</td>' for value in (f.pod, f.workload)),
            '<td class="e"><ul>'
            + "".join(f"<li>{escape(item)}</li>" for item in evidence_items(f.evidence))
            + "</ul></td>",
            f"<td>{escape(f.action)}</td>",
        ]
        for f in findings_by_weight(findings)
    )
    return _section("findings", "Findings, most severe and most costly first", _table(headers, rows))


def _nodes(report: Report) -> str:
    if not report.nodes:
        return _section("nodes", "GPU nodes", _note("No GPU nodes in the window."))
    headers = node_headers(report)
    rows = []
    for row in nodes_by_waste(report):
        cells = []
        for header, cell in zip(headers, node_cells(report, row), strict=True):
            if header == "class":
                cells.append(f"<td>{_tag(cell, CLASS_COLOURS[row.node_class])}</td>")
            else:
                cells.append(
                    f'<td class="n">{escape(cell)}</td>' if header in NUMERIC_HEADERS else f"<td>{escape(cell)}</td>"
                )
        rows.append(cells)
    return _section("nodes", "GPU nodes, most idle first", _table(headers, rows))


def _savings(savings: Savings | None, currency: str | None) -> str:
    if savings is None:
        return _section("savings", "Savings with gpupack", _note("Not computed for this report."))
    return _section("savings", "Savings with gpupack", _dl(savings_rows(savings, currency)))


def _compare(c: Comparison | None) -> str:
    if c is None:
        return _section("compare", "Before and after", _note("No comparison asked (--before A..B --after C..D)."))
    rows = (
        [f"<th>{escape(label)}</th>", f'<td class="n">{escape(b)}</td>', f'<td class="n">{escape(a)}</td>']
        for label, b, a in compare_rows(c)
    )
    verdict = f'<p class="advice {"good" if c.effective else "bad"}">{escape(verdict_line(c))}</p>'
    table = _table(("", "before", "after"), rows, right=frozenset({"before", "after"}))
    return _section("compare", "Before and after", table + verdict)
