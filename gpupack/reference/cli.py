"""docs/reference/cli/: one page per `gpupack` command, from the argparse tree (`gpupack.cli.build_parser`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from gpupack.cli import build_parser
from gpupack.reference.markdown import GENERATED, cell, code, table

WIDTH = 110
"""Columns of the usage lines (argparse wraps them)."""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    for action in parser._actions:  # argparse has no public way to walk its subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar if isinstance(action.metavar, str) else action.dest.upper())
    metavar = ""
    if action.nargs != 0:
        metavar = " " + (action.metavar if isinstance(action.metavar, str) else action.dest.upper())
    return ", ".join(code(f"{o}{metavar}") for o in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return code(str(action.default))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _choices(action: argparse.Action) -> str:
    return ", ".join(code(str(c)) for c in action.choices) if action.choices else ""


def _flag_table(actions: Iterable[argparse.Action]) -> str:
    """The flags (and positional arguments) of `actions`, `--help` left out: name, meaning, default."""
    rows = []
    for action in actions:
        if isinstance(action, argparse._HelpAction):
            continue
        help_text = action.help % {"default": action.default} if action.help else ""
        choices = _choices(action)
        rows.append((_flags(action), cell(help_text) + (f" (one of {choices})" if choices else ""), _default(action)))
    return table(("flag", "meaning", "default"), rows)


def command_page(name: str, parser: argparse.ArgumentParser, summary: str) -> str:
    """One command: what it does, its usage, and every flag."""
    out = [
        GENERATED.format(source="gpupack/cli.py"),
        f"# gpupack {name}\n",
        f"{summary[0].upper()}{summary[1:]}.\n" if summary else "",
        (parser.description or "") + "\n",
        f"```text\n{_usage(parser)}\n```\n",
        _flag_table(parser._actions),
    ]
    return "\n".join(part for part in out if part)


def pages() -> dict[str, str]:
    """`cli/index.md` and `cli/<command>.md`, keyed by their path under docs/reference/."""
    root = build_parser()
    commands = _subcommands(root)
    index = [
        GENERATED.format(source="gpupack/cli.py"),
        "# Commands\n",
        (root.description or "") + " One executable, `gpupack`, with a command per task; `gpupack COMMAND --help` "
        "prints the same as these pages.\n",
        table(
            ("command", "what it does"), ((f"[{code('gpupack ' + n)}]({n}.md)", h) for n, (_, h) in commands.items())
        ),
        "Options of `gpupack` itself:\n",
        _flag_table(a for a in root._actions if a.option_strings),  # not the subcommands' action
    ]
    out = {"cli/index.md": "\n".join(index)}
    for name, (parser, summary) in commands.items():
        out[f"cli/{name}.md"] = command_page(name, parser, summary)
    return out
