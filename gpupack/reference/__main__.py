"""`python -m gpupack.reference [--docs DIR] [--check]`: write the generated pages into DIR (default: the checkout's
docs/), or with --check only say which differ (exit 1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpupack.core.checkout import REPOSITORY
from gpupack.reference.pages import pages


def main(argv: list[str] | None = None) -> int:
    """Write (or check) every generated page; 1 when --check finds one stale."""
    parser = argparse.ArgumentParser(prog="python -m gpupack.reference", description=__doc__)
    parser.add_argument("--docs", type=Path, default=REPOSITORY / "docs", help="the documentation folder")
    parser.add_argument("--check", action="store_true", help="write nothing; list the stale pages, exit 1 if any")
    args = parser.parse_args(argv)
    stale = []
    for name, text in pages().items():
        path = args.docs / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    for name in stale:
        print(f"{verb}: docs/{name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
