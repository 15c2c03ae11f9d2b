"""What both webhook benchmarks admit and read: the recorded review, and the cluster the fake API server serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests/fixtures/recorded-k8s-1.36"
FIXTURE = RECORDED / "admission/000-mutate-llm-infer-7b-abc12.json"


def recorded_body() -> str:
    """The recorded AdmissionReview, its labels renamed from the recording's placeholder domain to gpupack.io/."""
    body = FIXTURE.read_text().replace("gpu.example.com/model-memory", "gpupack.io/gpu-memory")
    return body.replace("gpu.example.com/", "gpupack.io/")


def priority_classes() -> list[dict[str, Any]]:
    """The shipped PriorityClasses (`manifests/priorityclasses.yaml`)."""
    return [doc for doc in yaml.safe_load_all((ROOT / "manifests/priorityclasses.yaml").read_text()) if doc]


def nodes() -> list[dict[str, Any]]:
    """The recorded cluster's nodes (which MIG profiles exist)."""
    items: list[dict[str, Any]] = json.loads((RECORDED / "nodes.json").read_text())["items"]
    return items
