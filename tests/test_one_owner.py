"""One owner per fact: the GPU catalog, DCGM's names and fold, the raw-object predicates. Every consumer asks the
owner, so they cannot drift apart again (the A30's 4 slices had drifted against a hard-coded 7)."""

from __future__ import annotations

import ast
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gpupack.core import dcgm
from gpupack.core.gpus.catalog import CATALOG, MODELS, instance_slices, slice_table
from gpupack.extender.demand import demand_of
from gpupack.monitoring.rules import gpu_utilization
from gpupack.report.findings import all_findings
from gpupack.testing.dcgm import Workload
from gpupack.testing.history import (
    PROMETHEUS,
    PROMTOOL,
    Device,
    HistoryNode,
    PrometheusServer,
    Stint,
    backfill,
    constant,
    write_openmetrics,
)
from tests.conftest import ROOT, W, make_pod
from tests.extender_kit import policy
from tests.report_cluster_kit import gpus, inputs, node, usage
from tests.test_mutate import mutated

# the facts and their owners ----------------------------------------------------------------------------------------

OWNED = {
    "gpupack/core/dcgm.py": {
        dcgm.GPU_UTIL,
        dcgm.GR_ENGINE_ACTIVE,
        dcgm.FB_USED,
        dcgm.FB_FREE,
        dcgm.XID_ERRORS,
        dcgm.MODEL,
        dcgm.INSTANCE,
        dcgm.PROFILE,
        dcgm.EXPORTED_POD,
        dcgm.EXPORTED_NAMESPACE,
        *dcgm.HOST_LABELS,
    },
    "gpupack/core/objects.py": {
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.replicas",
        "nvidia.com/gpu.sharing-strategy",
        "nvidia.com/mig.capable",
        "nvidia.com/mig.strategy",
        "nvidia.com/mig.config",
        "nvidia.com/mig.config.state",
        "Succeeded",
        "Failed",
        "StatefulSet",
        "startTime",
    },
}
"""Each name, and the one module that may spell it."""
FAKES = ROOT / "gpupack" / "testing"
"""The test exporter writes what the real one does: it may spell the labels (it is no product code)."""


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """The string constants of a module that are not docstrings, and the literal parts of its f-strings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }
    docstrings |= {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # attribute docstrings
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            yield n.lineno, n.value


def test_every_name_is_spelled_only_by_its_owner() -> None:
    """A message may name a label (`no nvidia.com/gpu.product label`, built from the constant), a name on its own
    or in a query is the owner's: `{GPU_I_ID=""}` written out in the report had been a second owner."""
    found = []
    for path in sorted((ROOT / "gpupack").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if path.is_relative_to(FAKES):
            continue
        for owner, names in OWNED.items():
            if where == owner:
                continue
            for line, text in _code_strings(path):
                found += [f"{where}:{line} {name}" for name in names if name == text or f"{name}=" in text]
    assert found == []


def test_every_catalogued_mig_model_counts_its_slices_once() -> None:
    """A model's compute and memory slices are its full profile's, and every profile's name starts with its compute
    slices (`<n>g.`): the PromQL fold reads unknown names by that rule, so the catalog's must keep to it."""
    for name, profiles in CATALOG.items():
        model = MODELS[name]
        assert model.compute_slices == max(p.compute_slices for p in profiles), name
        assert model.memory_slices == max(p.memory_slices + min(p.starts) for p in profiles), name
        for p in profiles:
            assert p.name.startswith(f"{p.compute_slices}g."), p
            assert instance_slices(p.name) == instance_slices(p.name, name) == (p.compute_slices, model.compute_slices)
    assert MODELS["A30-24GB"].compute_slices == MODELS["A30-24GB"].memory_slices == 4


# one rule for "is this a StatefulSet pod" ----------------------------------------------------------------------

CONTROLLER = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1", "controller": True}
OWNER_ONLY = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1"}


def _batch_pod(owner: dict[str, Any] | None) -> dict[str, Any]:
    """A batch pod (its class requires spot) asking for a time-sliced GPU, with the given owner reference."""
    pod = make_pod({W + "workload": "batch"}, namespace="ml")
    pod["metadata"]["name"] = "db-0"
    pod["metadata"]["ownerReferences"] = [owner] if owner else []
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu.shared": "1"}}
    return pod


@pytest.mark.parametrize(
    ("owner", "stateful"),
    [(CONTROLLER, True), (OWNER_ONLY, False), (None, False)],
    ids=["controller", "owner-not-controller", "no-owner"],
)
def test_webhook_extender_and_report_agree_on_what_a_statefulset_pod_is(
    owner: dict[str, Any] | None, stateful: bool
) -> None:
    # The rule is Cluster Autoscaler's: the controller reference. The extender had looked at any owner reference.
    pod = _batch_pod(owner)
    after, _ = mutated(pod)
    terms = after["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    webhook = all(e["operator"] == "NotIn" for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"])
    # (kept off spot instead of required on it)
    extender = demand_of(pod, policy()).avoid_spot
    bound = {**pod, "kind": "Pod", "spec": {**pod["spec"], "nodeName": "spot"}, "status": {"phase": "Running"}}
    found = all_findings(inputs(usage(*gpus("spot", 4, 50.0)), [node("spot", 4, spot=True), bound]))
    report = any(f.kind == "inference-on-spot" and f.pod == "ml/db-0" for f in found)
    assert (webhook, extender, report) == (stateful, stateful, stateful)


# the MIG fold, in Python and in PromQL ---------------------------------------------------------------------------

UNKNOWN = ("3g.39gb", "1g.10gb+me", "1g.6gb+me", "2g.24gb")
"""Names the catalog does not list: driver drift, media extensions, the H100-94GB's."""
MIXES = {
    "a30-mix": [("2g.12gb", 0.9), ("1g.6gb", 0.4), ("1g.6gb", 1.0)],
    "a100-mix": [("3g.20gb", 0.5), ("2g.10gb", 0.25), ("1g.5gb", 1.0), ("1g.5gb", 0.0)],
    "h200-mix": [("4g.71gb", 0.3), ("3g.71gb", 0.6)],
}
"""GPUs holding several instances, each `(profile, activity)`."""
END = 1793577600.0


def _fold_cases() -> dict[str, list[tuple[str, float]]]:
    single = {f"one-{name.replace('+', '-')}": [(name, 0.7)] for name in [*slice_table(), *UNKNOWN]}
    return {**single, **MIXES}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus holding an hour of each case, one node per case, one GPU per node."""
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")
    nodes = []
    for name, instances in _fold_cases().items():
        devices = [
            Device(
                0,
                {dcgm.GR_ENGINE_ACTIVE: constant(activity)},
                mig=(profile, gid),
                stints=(Stint(END - 3600, Workload(f"w-{gid}", "ml")),),
            )
            for gid, (profile, activity) in enumerate(instances)
        ]
        nodes.append(HistoryNode(name, devices))
    workdir = tmp_path_factory.mktemp("fold")
    text = workdir / "dcgm.om"
    with text.open("w") as out:
        write_openmetrics(out, nodes, np.arange(END - 3600, END + 60, 30.0))
    backfill(text, workdir / "tsdb", block_hours=2)
    with PrometheusServer(workdir / "tsdb", oldest=END - 3600) as server:
        yield server.url
    shutil.rmtree(workdir, ignore_errors=True)


def test_the_recording_rules_fold_every_profile_as_the_python_fold_does(prometheus: str) -> None:
    """The shipped rule's expression, evaluated by Prometheus, against `dcgm.busy_fraction` of the same instances:
    every catalogued profile alone, names the catalog does not know, and GPUs of several instances."""
    query = urllib.parse.urlencode({"query": gpu_utilization("5m"), "time": END})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=30) as answer:
        result = orjson.loads(answer.read())["data"]["result"]
    got = {r["metric"]["node"]: float(r["value"][1]) for r in result}
    expected = {
        name: 100 * dcgm.busy_fraction((activity, profile) for profile, activity in instances)
        for name, instances in _fold_cases().items()
    }
    assert got == pytest.approx(expected)
    assert got["one-4g.24gb"] == pytest.approx(70.0) and got["one-4g.20gb"] == pytest.approx(40.0)
