"""Rendering the Helm chart (charts/gpupack) in the tests: `helm template` with values, the objects it renders,
and the value sets the tests render it with."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT

CHART = ROOT / "charts" / "gpupack"
NS = "gpupack-system"
CA_BUNDLE = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
"""A caBundle value (base64 of a PEM header): the chart only passes it through."""

VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "main-scheduler": ["scheduler.mode=main"],
    "cert-manager": ["certificates.certManager.enabled=true"],
    "cert-manager, main scheduler": ["certificates.certManager.enabled=true", "scheduler.mode=main"],
    "monitoring": ["monitoring.enabled=true"],
    "monitoring, main scheduler": ["monitoring.enabled=true", "scheduler.mode=main"],
    "another namespace and scheduler name": [
        "namespaceOverride=gpu-cost",
        "createNamespace=true",
        "scheduler.name=packer",
        "policy.mode=enforce",
    ],
}
"""`--set` values per case; every case but cert-manager's also gets the caBundle (`sets`)."""


def sets(case: str) -> list[str]:
    """The `--set` values of a VALUE_SETS case, with the caBundle unless cert-manager issues the certificate."""
    values = VALUE_SETS[case]
    if not any(v.startswith("certificates.certManager.enabled=true") for v in values):
        values = [*values, f"certificates.webhook.caBundle={CA_BUNDLE}"]
    return values


def helm_template(
    *set_values: str, values_file: Path | None = None, namespace: str = NS, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`helm template gpupack charts/gpupack -n NAMESPACE --set ...`; AssertionError with helm's message when it
    fails and `check`."""
    argv = ["helm", "template", "gpupack", str(CHART), "--namespace", namespace]
    for value in set_values:
        argv += ["--set", value]
    if values_file is not None:
        argv += ["--values", str(values_file)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr}")
    return done


def render(*set_values: str, values_file: Path | None = None, namespace: str = NS) -> list[dict[str, Any]]:
    """The objects `helm template` renders (hooks included)."""
    text = helm_template(*set_values, values_file=values_file, namespace=namespace).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})
