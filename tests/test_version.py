"""The version has one owner, pyproject.toml: the package reports it, the Helm chart is versioned with it, and every
gpupack image the kustomizations render is tagged with it."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpupack
from tests.conftest import ROOT

IMAGES = ("ghcr.io/gpupack/gpupack", "ghcr.io/gpupack/gpupack-tools")
"""The services' image and the tools' (the Dockerfile's default and `tools` targets)."""
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def rendered_images(kustomization: Path) -> list[str]:
    """Every container and init container image of `kubectl kustomize` on the folder."""
    out = subprocess.run(["kubectl", "kustomize", str(kustomization)], check=True, capture_output=True, text=True)
    images = []
    for doc in yaml.safe_load_all(out.stdout):
        pod = pod_spec(doc) if doc else None
        for container in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
            images.append(container["image"])
    return images


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod template's spec of a workload (Deployment, Job, ...), the spec of a Pod, else None."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return dict(spec)
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    return template["spec"] if template else None


def test_the_package_reports_the_version_pyproject_declares() -> None:
    assert gpupack.__version__ == DECLARED == importlib.metadata.version("gpupack")


def test_a_source_tree_never_installed_reads_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gpupack, "version", not_installed)
    assert gpupack._version() == DECLARED


@pytest.mark.parametrize("folder", ["manifests", "manifests/mig-plan", "overlays/with-monitoring"])
def test_every_gpupack_image_is_tagged_with_the_package_version(folder: str) -> None:
    """The tag is written once per kustomization (`images:`), not in each object; a release that bumps
    pyproject.toml and forgets a kustomization, or an object that pins its own tag, fails here."""
    ours = [image for image in rendered_images(ROOT / folder) if image.partition(":")[0] in IMAGES]
    assert ours, f"{folder} renders no gpupack container"
    assert {image.partition(":")[2] for image in ours} == {DECLARED}


def test_the_chart_and_its_app_are_versioned_with_the_package() -> None:
    """Chart.yaml's version and appVersion (the default image tag) are pyproject.toml's; charts/generate.py writes
    them (`make manifests`), and a release that bumps pyproject.toml and does not run it fails here."""
    chart = yaml.safe_load((ROOT / "charts" / "gpupack" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (DECLARED, DECLARED)


def test_the_mig_plan_job_runs_the_tools_image_which_has_the_solver() -> None:
    """`gpupack mig-plan` needs scipy, which the services' image leaves out: the Job names the image the
    Dockerfile's `tools` target builds, and that target installs the migplan extra."""
    assert rendered_images(ROOT / "manifests/mig-plan") == [f"{IMAGES[1]}:{DECLARED}"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "AS tools" in dockerfile and "migplan" in dockerfile.split("AS tools")[0].split("AS build")[1]
    assert dockerfile.rstrip().split("FROM ")[-1].startswith("python:3.11-slim AS service")  # the default target


def test_the_command_prints_its_version() -> None:
    """Through the real entry point, as `gpupack --version` runs it: the version and nothing else, exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "gpupack", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, f"gpupack {DECLARED}\n", "")
