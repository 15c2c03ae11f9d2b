"""`gpupack mutate`: what the webhook would do to a Pod, offline, for admins previewing a policy change.

The webhook's one input that changes by the second, whether the gpupack scheduler has a live leader, comes from a
Lease file when given (`kubectl get lease -o json`, judged at the time of the preview) and is otherwise assumed
live; the text output says which.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpupack.core.cluster import ClusterFacts
from gpupack.core.contract import DEFAULT_SCHEDULER
from gpupack.core.lease import ASSUMED_LIVE, LeaseRef, SchedulerStatus, observe
from gpupack.core.policy import Policy
from gpupack.core.policy_store import LoadedPolicy
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import PatchOp, apply_patch
from gpupack.webhook.review import BadReview, parse_review


class PreviewError(ValueError):
    """The input is neither a Pod nor an AdmissionReview, or cannot be read."""


@dataclass(frozen=True, slots=True)
class Preview:
    """The admission answer for one pod, with the pod as it would be created."""

    allowed: bool
    outcome: str
    message: str
    patch: list[PatchOp]
    warnings: list[str]
    pod: dict[str, Any]
    scheduler: str = ""
    """One line on the scheduler the policy routes to: assumed live, live, not live and why, or routing off."""

    def as_json(self) -> dict[str, Any]:
        """The `--json` shape: allowed, message, patch, warnings, pod."""
        return {
            "allowed": self.allowed,
            "message": self.message,
            "patch": self.patch,
            "warnings": self.warnings,
            "pod": self.pod,
        }


def read_document(path: str) -> dict[str, Any]:
    """A YAML or JSON document from a file, or standard input for `-`."""
    try:
        text = Path("/dev/stdin").read_text() if path == "-" else Path(path).read_text()
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise PreviewError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise PreviewError(f"{path} is not YAML or JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PreviewError(f"{path} must hold one Pod or AdmissionReview object")
    return data


def lease_status(lease: dict[str, Any], policy: Policy, now: float | None = None) -> SchedulerStatus:
    """The verdict the webhook would give at `now` (default: now) on the policy's scheduler, from a Lease object.

    Raises PreviewError when the file is another kind of object or another Lease than the policy's.
    """
    ref = LeaseRef(policy.scheduler.lease.namespace, policy.scheduler.lease.name)
    if lease.get("kind", "Lease") != "Lease":
        raise PreviewError(f"--lease: expected a Lease, got kind {lease.get('kind')!r}")
    meta = lease.get("metadata") or {}
    named = (
        LeaseRef(meta.get("namespace", ref.namespace), meta.get("name", ref.name)) if isinstance(meta, dict) else ref
    )
    if named != ref:
        raise PreviewError(f"--lease: lease {named} is not the policy's scheduler.lease {ref}")
    moment = time.time() if now is None else now
    return observe(ref, lease, moment).status(moment, policy.scheduler.grace_seconds)


def scheduler_line(policy: Policy, status: SchedulerStatus) -> str:
    """What the preview assumed or read about the policy's scheduler, in one line."""
    scheduler = policy.scheduler
    if scheduler.name is None:
        return "scheduler: routing off (scheduler.name is null): schedulerName is left alone"
    lease = f"{scheduler.lease.namespace}/{scheduler.lease.name}"
    if status is ASSUMED_LIVE:
        return f"scheduler: {scheduler.name} assumed live (no --lease given; the webhook reads lease {lease})"
    if status.live:
        return f"scheduler: {scheduler.name} live (lease {lease} held and renewed)"
    why = status.detail.removeprefix("lease ")
    return (
        f"scheduler: {scheduler.name} has no live leader (lease {lease}: {why}): GPU pods stay on {DEFAULT_SCHEDULER}"
    )


def preview(
    document: dict[str, Any],
    loaded: LoadedPolicy,
    facts: ClusterFacts,
    opted_in_namespace: bool,
    scheduler: SchedulerStatus = ASSUMED_LIVE,
) -> Preview:
    """Plan the admission of a Pod (or of the Pod inside an AdmissionReview), with `scheduler` the verdict on the
    policy's scheduler (`lease_status`; assumed live by default)."""
    namespace: str | None = None
    if document.get("kind") == "AdmissionReview":
        try:
            review = parse_review(json.dumps(document).encode())
        except BadReview as exc:
            raise PreviewError(str(exc)) from exc
        pod, namespace = orjson.loads(memoryview(review.request.object)), review.request.namespace
        if pod is None:
            raise PreviewError("the AdmissionReview carries no request.object")
    elif document.get("kind", "Pod") == "Pod":
        pod = document
    else:
        raise PreviewError(f"expected a Pod or an AdmissionReview, got kind {document.get('kind')!r}")
    context = MutationContext(loaded.policy, loaded.version, facts, opted_in_namespace, scheduler)
    decision = plan(pod, namespace, context)
    return Preview(
        decision.allowed,
        decision.outcome,
        decision.message,
        decision.ops,
        decision.warnings,
        apply_patch(pod, decision.ops) if decision.allowed else pod,
        scheduler_line(loaded.policy, scheduler),
    )


def render_text(result: Preview) -> str:
    """A human-readable report: verdict, warnings, patch, resulting pod."""
    verdict = "allowed" if result.allowed else "DENIED"
    lines = [f"{verdict} ({result.outcome})" + (f": {result.message}" if not result.allowed else "")]
    lines += [result.scheduler] if result.scheduler else []
    if result.warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in result.warnings]
    lines += ["", f"patch ({len(result.patch)} operations):"]
    lines += [f"  {json.dumps(op)}" for op in result.patch] or ["  (empty)"]
    lines += ["", "pod:", yaml.safe_dump(result.pod, sort_keys=False).rstrip()]
    return "\n".join(lines)
