"""The services need none of the extras: with scipy, matplotlib and rich unimportable, every command still builds
its parser, the services import, `certs` and `mutate` run, and the tools refuse in one line naming the extra.

The libraries are hidden in a subprocess (`sys.modules[name] = None` makes importing them fail as if they were
not installed), which is what a core-only install (`pip install .`, the image) looks like to gpupack.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpupack.cli import EXTRAS
from tests.conftest import ROOT, W, make_pod

OPTIONAL = ("scipy", "matplotlib", "rich")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCENARIO = str(ROOT / "scenarios" / "synthetic-day.yaml")

HIDE = "import sys\nfor name in filter(None, sys.argv.pop(1).split(',')):\n    sys.modules[name] = None\n"


def without(hidden: tuple[str, ...], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where `hidden` cannot be imported; `args` become its sys.argv[1:]."""
    return subprocess.run(
        [sys.executable, "-c", HIDE + code, ",".join(hidden), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def gpupack_without(hidden: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m gpupack ARGS`, the real entry point, without `hidden`."""
    code = "import runpy\nsys.argv[0] = 'gpupack'\nrunpy.run_module('gpupack', run_name='__main__', alter_sys=True)\n"
    return without(hidden, code, *args)


def names(requirements: list[str]) -> set[str]:
    """The distribution names of requirement strings (`scipy>=1.11` -> `scipy`)."""
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


@pytest.mark.parametrize("command", sorted(EXTRAS))
def test_each_tool_names_an_extra_that_installs_its_libraries(command: str) -> None:
    extra, libraries = EXTRAS[command]
    assert names(PYPROJECT["optional-dependencies"][extra]) == set(libraries)


def test_the_core_install_leaves_the_optional_libraries_out_and_the_tests_pull_every_extra() -> None:
    assert not names(PYPROJECT["dependencies"]) & set(OPTIONAL)
    assert "numpy" in names(PYPROJECT["dependencies"])  # the extender's packing
    tools = {extra for extra, _ in EXTRAS.values()}
    (self_reference,) = [r for r in PYPROJECT["optional-dependencies"]["test"] if r.startswith("gpupack[")]
    assert set(self_reference.removeprefix("gpupack[").removesuffix("]").split(",")) == tools


@pytest.mark.parametrize(
    "command", [[], ["webhook"], ["extender"], ["mutate"], ["certs"], ["report"], ["mig-plan"], ["simulate"], ["demo"]]
)
def test_every_command_explains_itself_without_the_extras(command: list[str]) -> None:
    result = gpupack_without(OPTIONAL, *command, "--help")
    assert (result.returncode, result.stderr) == (0, "") and "usage: gpupack" in result.stdout


def test_the_services_import_without_the_extras() -> None:
    result = without(OPTIONAL, "import gpupack.webhook.service, gpupack.extender.service, gpupack.certs.issue")
    assert (result.returncode, result.stderr) == (0, "")


def test_certs_and_mutate_run_without_the_extras(tmp_path: Path) -> None:
    issued = gpupack_without(OPTIONAL, "certs", "--out", str(tmp_path), "--dns", "gpupack-webhook")
    assert issued.returncode == 0 and (tmp_path / "tls.crt").is_file(), issued.stderr
    pod = tmp_path / "pod.json"
    pod.write_text(json.dumps(make_pod({W + "workload": "batch"})))
    previewed = gpupack_without(OPTIONAL, "mutate", str(pod), "--json")
    assert previewed.returncode == 0, previewed.stderr
    assert json.loads(previewed.stdout)["allowed"] is True


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("scipy", ["mig-plan", "--scenario", SCENARIO, "--output", "{tmp}/mig.yaml"], "migplan"),
        ("matplotlib", ["report", "--nvidia-smi", "{tmp}/node-a.csv", "--html", "{tmp}/report.html"], "report"),
        ("rich", ["report", "--nvidia-smi", "{tmp}/node-a.csv", "--json"], "report"),
        ("matplotlib", ["simulate", "--scenario", SCENARIO, "--plot", "{tmp}/day.png"], "simulate"),
        ("rich", ["simulate", "--scenario", SCENARIO], "simulate"),
        ("matplotlib", ["demo", "--workdir", "{tmp}/demo"], "report"),
    ],
)
def test_a_tool_without_its_extra_says_in_one_line_which_to_install_before_any_work(
    tmp_path: Path, hidden: str, args: list[str], extra: str
) -> None:
    result = gpupack_without((hidden,), *(a.format(tmp=tmp_path) for a in args))
    message = f"gpupack {args[0]}: needs {hidden}, not installed: pip install 'gpupack[{extra}]'\n"
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message)
    assert list(tmp_path.iterdir()) == []  # nothing written: refused before the work


def test_the_tools_run_with_their_extras(tmp_path: Path) -> None:
    """The other side: with every extra installed (the test environment), the check lets a tool through."""
    result = gpupack_without((), "mig-plan", "--scenario", SCENARIO, "--json")
    assert result.returncode in (0, 1) and "nodes" in json.loads(result.stdout), result.stderr
