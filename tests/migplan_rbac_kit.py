"""The shipped mig-plan manifests (manifests/mig-plan/) as kustomize builds them. Whether their RBAC allows what
`--apply` asks is the real API server's answer: tests/test_migplan_real.py."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.conftest import ROOT

MANIFESTS = ROOT / "manifests" / "mig-plan"


def built() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(MANIFESTS)], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]
