"""The documentation site as it is published: `mkdocs build --strict` (a broken link, a missing anchor or a page
left out of the navigation fails it), every alert's `runbook_url` on a page of the built site, and two pages as a
reader sees them in headless Chromium."""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import yaml
from matplotlib.image import imread

from gpupack.core.checkout import REPOSITORY
from gpupack.monitoring.rules import groups
from tests.browser import screenshot

WINDOW = (1280, 900)


def mkdocs_config() -> dict[str, object]:
    """mkdocs.yml."""
    data: dict[str, object] = yaml.safe_load((REPOSITORY / "mkdocs.yml").read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as `make docs` builds it, strict."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out


def test_the_strict_build_refuses_a_broken_link(tmp_path: Path) -> None:
    # the same configuration on a copy of the pages with one link broken: the strict build must fail, naming it
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPOSITORY / "docs"), str(docs)], check=True)
    page = docs / "reference" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text((REPOSITORY / "mkdocs.yml").read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr


def alerts() -> list[tuple[str, str]]:
    return [(r["alert"], r["annotations"]["runbook_url"]) for g in groups() for r in g["rules"] if "alert" in r]


@pytest.mark.parametrize(("alert", "url"), alerts(), ids=[a for a, _ in alerts()])
def test_every_alerts_runbook_url_is_a_page_of_the_site_about_that_alert(site: Path, alert: str, url: str) -> None:
    root = str(mkdocs_config()["site_url"])
    assert url.startswith(root), f"{alert}: {url} is not on the site {root}"
    page = site / urlsplit(url).path.removeprefix(urlsplit(root).path) / "index.html"
    assert page.is_file(), f"{alert}: {url} has no page in the built site ({page})"
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", page.read_text(encoding="utf-8"), re.S)
    assert h1 is not None and alert in h1.group(1), f"{alert}: the page's title is not the alert's name"


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site on a loopback HTTP server, as a web server publishes it."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def view(url: str, folder: Path) -> tuple[np.ndarray, str]:
    shot = folder / "page.png"
    dom = screenshot(url, shot, WINDOW, folder / "profile")
    keep = os.environ.get("GPUPACK_SCREENSHOTS")  # a folder to keep the screenshots in, to look at them
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{urlsplit(url).path.strip('/').replace('/', '-') or 'home'}.png").write_bytes(shot.read_bytes())
    return np.round(imread(shot)[:, :, :3] * 255).astype(np.int16), dom


def colours(pixels: np.ndarray) -> int:
    packed = (pixels[:, :, 0].astype(np.int32) << 16) | (pixels[:, :, 1].astype(np.int32) << 8) | pixels[:, :, 2]
    return len(np.unique(packed))


def header_is_the_themes_green(pixels: np.ndarray) -> bool:
    """Material's `green` primary (#4caf50) across the top bar."""
    top = pixels[10:40, :, :]
    return bool((np.abs(top - np.array([76, 175, 80])) <= 12).all(axis=2).mean() > 0.5)


def test_the_home_page_as_a_reader_sees_it(served: str, tmp_path: Path) -> None:
    pixels, dom = view(served, tmp_path)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0]) and colours(pixels) > 200
    assert header_is_the_themes_green(pixels)
    for section in ("Getting started", "ML developers", "Cluster admins", "Operations", "Reference"):
        assert section in dom, f"the navigation has no {section}"
    assert "To be written" not in dom


def test_the_policy_reference_as_a_reader_sees_it(served: str, tmp_path: Path) -> None:
    pixels, dom = view(served + "reference/policy/", tmp_path)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0]) and colours(pixels) > 200
    assert header_is_the_themes_green(pixels)
    assert "<h1" in dom and "Policy reference" in dom
    assert re.search(r"<td><code>extender\.hotThreshold</code></td>", dom)
