"""The repository stands on its own and its packages keep their layers: no file reaches outside the checkout, and
the import-linter layers contract in pyproject.toml refuses an import that goes up a layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SKIPPED = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "data"}
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg", ".sh", ".tpl"}


def repository_files() -> Iterator[Path]:
    """The repository's text files (not the virtualenv, caches or the trace data)."""
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIPPED or any(p.endswith(".egg-info") or p == ".import_linter_cache" for p in parts):
            continue
        if path.is_file() and (path.suffix in TEXT or path.name in {"Makefile", "Dockerfile", "run"}):
            yield path


def test_no_file_of_the_repository_reads_or_names_a_path_outside_it() -> None:
    outside = "../" + "shared"  # spelled apart, so this file does not name it either
    named = [str(p.relative_to(ROOT)) for p in repository_files() if outside in p.read_text(errors="replace")]
    assert named == []


def _copy(tmp_path: Path) -> Path:
    """The packages import-linter analyses, copied with the links into webhook/, extender/, certs/ resolved."""
    for name in ("gpupack", "tests", "bench"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("gpupack/core/contract.py", "gpupack.report.cli"),  # the core importing a tool
        ("extender/live.py", "gpupack.webhook.mutate"),  # one service importing the other
        ("gpupack/report/usage.py", "gpupack.testing.dcgm"),  # product code importing a test fake
        ("gpupack/placement/choice.py", "gpupack.demo.cluster"),  # product code importing the demo
        ("gpupack/simulator/trace.py", "gpupack.migplan.solve"),  # the simulator importing the planner above it
    ],
)
def test_the_layers_contract_refuses_an_import_up_a_layer(tmp_path: Path, module: str, upward: str) -> None:
    root = _copy(tmp_path)
    target = root / "gpupack" / module.removeprefix("gpupack/")
    target.write_text(target.read_text() + f"\nimport {upward}  # noqa: E402\n")
    done = _lint(root)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    importer = "gpupack." + module.removeprefix("gpupack/").removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {upward}" in done.stdout


def test_the_copy_keeps_the_layers_unchanged(tmp_path: Path) -> None:
    """The refusals above are the injected imports': the same copy without them passes."""
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
