"""`gpupack mutate`: what the webhook would do to a Pod, offline, for admins previewing a policy change."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpupack.cluster import ClusterFacts
from gpupack.policy_store import LoadedPolicy
from webhook.mutate import MutationContext, plan
from webhook.patches import PatchOp, apply_patch
from webhook.review import BadReview, parse_review


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


def preview(document: dict[str, Any], loaded: LoadedPolicy, facts: ClusterFacts, opted_in_namespace: bool) -> Preview:
    """Plan the admission of a Pod (or of the Pod inside an AdmissionReview)."""
    namespace: str | None = None
    if document.get("kind") == "AdmissionReview":
        try:
            review = parse_review(json.dumps(document).encode())
        except BadReview as exc:
            raise PreviewError(str(exc)) from exc
        pod, namespace = review.request.object, review.request.namespace
        if pod is None:
            raise PreviewError("the AdmissionReview carries no request.object")
    elif document.get("kind", "Pod") == "Pod":
        pod = document
    else:
        raise PreviewError(f"expected a Pod or an AdmissionReview, got kind {document.get('kind')!r}")
    decision = plan(pod, namespace, MutationContext(loaded.policy, loaded.version, facts, opted_in_namespace))
    return Preview(
        decision.allowed,
        decision.outcome,
        decision.message,
        decision.ops,
        decision.warnings,
        apply_patch(pod, decision.ops) if decision.allowed else pod,
    )


def render_text(result: Preview) -> str:
    """A human-readable report: verdict, warnings, patch, resulting pod."""
    verdict = "allowed" if result.allowed else "DENIED"
    lines = [f"{verdict} ({result.outcome})" + (f": {result.message}" if not result.allowed else "")]
    if result.warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in result.warnings]
    lines += ["", f"patch ({len(result.patch)} operations):"]
    lines += [f"  {json.dumps(op)}" for op in result.patch] or ["  (empty)"]
    lines += ["", "pod:", yaml.safe_dump(result.pod, sort_keys=False).rstrip()]
    return "\n".join(lines)
