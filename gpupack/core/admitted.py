"""A Pod as kube-apiserver hands it to mutating webhooks: what the admission chain has set before any webhook runs.

The built-in Priority plugin has resolved `spec.priority` (0 without a class) and `spec.preemptionPolicy`, the
DefaultTolerationSeconds plugin has added the `not-ready` toleration, and the API's defaulting has named
`default-scheduler` (see docs/platform/admission.md). The synthetic day builds its pods with it, and so do the demo
and the tests, so that all of them feed the webhook what the API server would.
"""

from __future__ import annotations

import uuid
from typing import Any

from gpupack.core.contract import DEFAULT_SCHEDULER


def admitted_pod(
    name: str,
    labels: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    owner: str | None = None,
    namespace: str = "ml-serving",
) -> dict[str, Any]:
    """A pod as the API server hands it to webhooks: Priority plugin defaults, default tolerations and the default
    `schedulerName` set."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": name.rsplit("-", 1)[0],
                "uid": str(uuid.uuid4()),
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "main", "image": "registry.example/app:1", "resources": resources or {}}],
            "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "schedulerName": DEFAULT_SCHEDULER,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
    }
