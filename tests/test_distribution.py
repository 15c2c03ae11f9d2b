"""What is shipped: the wheel claims the one name `gpupack` in site-packages, is built from the folders the
Dockerfile copies (gpupack/ and the top-level folders its symlinks point at), and carries the Apache License."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel `pip wheel` builds from a copy of what the Dockerfile copies (no build/ or egg-info left over
    from the working tree can slip into it, and what the image builds from is shown to suffice)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for name in sorted(wheel_folders()):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in BESIDE:
        shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=280,
    )
    (built,) = (work / "dist").glob("gpupack-*.whl")
    return zipfile.ZipFile(built)


def dist_info(wheel: zipfile.ZipFile) -> str:
    (folder,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
    return folder


BUILDS = pytest.mark.timeout(300)
"""For the tests that use the wheel: the first builds it, in an isolated environment pip installs setuptools into."""


@BUILDS
def test_the_wheel_claims_one_name_in_site_packages(wheel: zipfile.ZipFile) -> None:
    info = dist_info(wheel)
    top_level = {n.split("/")[0] for n in wheel.namelist()} - {info}
    assert top_level == {"gpupack"}
    declared = wheel.read(f"{info}/top_level.txt").decode().split()
    assert declared == ["gpupack"]


@BUILDS
def test_the_wheel_holds_the_linked_packages_as_files(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for folder in sorted(wheel_folders() - {"gpupack"}):
        assert f"gpupack/{folder}/__init__.py" in names
    symlinks = [i.filename for i in wheel.infolist() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    assert symlinks == []


@BUILDS
def test_the_wheel_carries_the_license_and_the_core_dependencies(wheel: zipfile.ZipFile) -> None:
    info = dist_info(wheel)
    assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
    assert metadata["License-Expression"] == "Apache-2.0"
    core = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(core) == sorted(PROJECT["project"]["dependencies"])
