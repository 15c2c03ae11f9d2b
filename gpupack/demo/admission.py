"""What the demo needs around the webhook: its certificates, and the lines it prints for each admitted pod."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson

from gpupack.certs.issue import issue_ca, issue_serving_cert, write_pair
from gpupack.webhook.patches import PatchOp, apply_patch


def ensure_certs(directory: Path) -> tuple[Path, Path, Path]:
    """Issue a CA and a localhost certificate on first run; reuse them afterwards."""
    cert, key, ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    if not (cert.exists() and key.exists() and ca.exists()):
        authority = issue_ca("gpupack-demo-ca")
        write_pair(directory, authority, issue_serving_cert(authority, ["localhost"], ["127.0.0.1"]))
    return cert, key, ca


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
