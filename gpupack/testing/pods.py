"""AdmissionReview requests as kube-apiserver sends them, for the tests, the benchmarks and the demo."""

from __future__ import annotations

import uuid
from typing import Any


def review(pod: dict[str, Any], dry_run: bool = False, uid: str | None = None) -> dict[str, Any]:
    """Wrap a pod in an AdmissionReview request, as the API server sends it for a CREATE."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name"),
            "namespace": pod["metadata"].get("namespace"),
            "operation": "CREATE",
            "object": pod,
            "dryRun": dry_run,
        },
    }
