"""Pages as a reader sees them: Debian's Chromium, headless, a screenshot and the DOM after load."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # nothing but loopback could be fetched
    "--hide-scrollbars",
]


def screenshot(url: str, shot: Path, window: tuple[int, int], profile: Path) -> str:
    """Open `url` in a `window`-sized headless Chromium, write the screenshot to `shot`, return the DOM after load
    (skips the test when Chromium is missing: `make test` installs it, the Makefile's system-deps)."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it: the Makefile's system-deps)")
    done = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--window-size={window[0]},{window[1]}",
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-3000:]
    return done.stdout
