"""What is shipped: the image copies the folders the package is built from (gpupack/ and the top-level folders
its symlinks point at), and the package carries the Apache License its metadata names."""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path

from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BESIDE = ("pyproject.toml", "README.md", "LICENSE")
"""The files the build reads beside the packages: the project, its readme and its license file."""
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""https://www.apache.org/licenses/LICENSE-2.0.txt (and Debian's /usr/share/common-licenses/Apache-2.0)."""


def wheel_folders() -> set[str]:
    """The top-level folders the wheel's files come from: those of pyproject's package patterns (`gpupack*`)
    and, for each symlink under them, the top-level folder it points into (webhook/, extender/, certs/)."""
    patterns = PROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    folders = {pattern.split(".")[0].rstrip("*") for pattern in patterns}
    for folder in list(folders):
        for parent, dirs, files in os.walk(ROOT / folder):
            for name in dirs + files:
                path = Path(parent, name)
                if path.is_symlink():
                    target = path.resolve().relative_to(ROOT)  # a link out of the repository fails here
                    folders.add(target.parts[0])
    return folders


def dockerfile_copies() -> set[str]:
    """The sources of the Dockerfile's COPY instructions from the build context (not `--from` a stage)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    sources: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words[1:] if not w.startswith("--")]
        sources.update(p.rstrip("/").removeprefix("./") for p in paths[:-1])  # the last one is the destination
    return sources


def test_the_packages_come_from_gpupack_and_the_folders_its_symlinks_name() -> None:
    assert wheel_folders() == {"gpupack", "webhook", "extender", "certs"}


def test_the_image_copies_every_folder_the_wheel_is_built_from() -> None:
    """`pip install .` in the image sees only what was copied: a folder left out turns a symlink in gpupack/
    into a dangling one, and its package silently goes missing from the image."""
    missing = (wheel_folders() | set(BESIDE)) - dockerfile_copies()
    assert not missing, f"the Dockerfile does not COPY {sorted(missing)}"


def test_the_license_is_the_apache_license_verbatim() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    assert (PROJECT["project"]["license"], PROJECT["project"]["license-files"]) == ("Apache-2.0", ["LICENSE"])
