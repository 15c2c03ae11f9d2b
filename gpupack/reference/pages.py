"""Every generated page, by its path under docs/: what `python -m gpupack.reference` writes and the drift test
compares."""

from __future__ import annotations

from gpupack.reference import cli, http, labels, metrics, policy
from gpupack.reference.markdown import GENERATED, table

SNIPPETS = ".generated"
"""Where the tables the hand-written pages include live (pymdownx.snippets' base path; a dot folder is no page)."""


def index() -> str:
    """docs/reference/index.md."""
    rows = [
        ("[Policy](policy.md)", "every field of the policy document, its type, default and meaning"),
        ("[Labels and annotations](labels.md)", "what developers set and what the webhook writes"),
        ("[Metrics](metrics.md)", "what each program exports"),
        ("[HTTP APIs](http.md)", "the routes of the webhook, the extender and the health listener"),
        ("[Commands](cli/index.md)", "every `gpupack` command and flag"),
    ]
    return "\n".join(
        [
            GENERATED.format(source="gpupack/reference"),
            "# Reference\n",
            "Written from the code: each page is generated from what owns its facts (the policy model's field "
            "docstrings, the labels catalog, the argparse tree, the metric declarations, the services' routes), and "
            "a test fails when a committed page differs from what the code writes. Regenerate with `make "
            "reference`.\n",
            table(("page", "what it holds"), rows),
        ]
    )


def pages() -> dict[str, str]:
    """Path under docs/ -> content, for every generated file."""
    out = {
        "reference/index.md": index(),
        "reference/policy.md": policy.page(),
        "reference/labels.md": labels.page(),
        "reference/metrics.md": metrics.page(),
        "reference/http.md": http.page(),
        f"{SNIPPETS}/labels-table.md": labels.developer_table(),
    }
    out.update({f"reference/{path}": text for path, text in cli.pages().items()})
    return out
