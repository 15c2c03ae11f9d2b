"""The embedded demo behind `make run`: a real webhook on localhost over TLS, fed a handful of demo pods.

No cluster is needed: the webhook runs with the built-in policy and no API access, so priority values come
from the policy. Each pod goes through HTTPS as an AdmissionReview, exactly as the API server would send it.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import orjson

from gpupack.certs.issue import issue_ca, issue_serving_cert, write_pair
from gpupack.core.contract import DEFAULT_SCHEDULER
from gpupack.webhook.patches import PatchOp, apply_patch


def demo_pod(
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


def ensure_certs(directory: Path) -> tuple[Path, Path, Path]:
    """Issue a CA and a localhost certificate on first run; reuse them afterwards."""
    cert, key, ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    if not (cert.exists() and key.exists() and ca.exists()):
        authority = issue_ca("gpupack-demo-ca")
        write_pair(directory, authority, issue_serving_cert(authority, ["localhost"], ["127.0.0.1"]))
    return cert, key, ca


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


def describe(title: str, pod: dict[str, Any], response: dict[str, Any]) -> list[str]:
    """What changed and why, for one pod."""
    lines = [f"== {title}: {pod['metadata']['namespace']}/{pod['metadata']['name']}"]
    if not response["allowed"]:
        lines.append(f"   DENIED (HTTP {response['status']['code']} in status): {response['status']['message']}")
        return lines
    ops: list[PatchOp] = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    if not ops:
        lines.append("   admitted untouched")
        return lines
    after = apply_patch(pod, ops)
    container = after["spec"]["containers"][0]
    lines.append(f"   resources: {orjson.dumps(container.get('resources', {})).decode()}")
    lines.append(
        f"   priority: {after['spec'].get('priorityClassName', '-')} = {after['spec'].get('priority')}"
        f" ({after['spec'].get('preemptionPolicy')})"
    )
    before, now = pod["spec"].get("schedulerName"), after["spec"].get("schedulerName")
    lines.append(f"   scheduler: {before} -> {now}" if now != before else f"   scheduler: {now} (unchanged)")
    for warning in response.get("warnings", []):
        lines.append(f"   - {warning}")
    lines.append(f"   patch: {len(ops)} operations")
    return lines
