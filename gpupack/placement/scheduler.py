"""The part of kube-scheduler the demo needs in front of the extender: its own feasibility filter.

kube-scheduler sends the extender only nodes that passed its own plugins (resource fit, taints, node selector
and required node affinity); the demo applies the same rules, on the mutated pod, before calling `/filter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupack.extender.demand import pod_requests


def tolerates(pod: Mapping[str, Any], taints: list[dict[str, str]]) -> bool:
    """Every NoSchedule / NoExecute taint of the node is tolerated by the pod."""
    tolerations = pod.get("spec", {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", "")


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selects(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """nodeSelector and required node affinity (terms ORed, expressions ANDed) accept a node's labels."""
    spec = pod.get("spec", {})
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        (spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    return any(
        all(_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )


def fits(requests: Mapping[str, int], allocatable: Mapping[str, int], used: Mapping[str, int]) -> bool:
    """Every requested resource has room left (NodeResourcesFit)."""
    return all(n <= allocatable.get(r, 0) - used.get(r, 0) for r, n in requests.items() if n > 0)


def feasible(
    pod: Mapping[str, Any], node: Mapping[str, Any], allocatable: Mapping[str, int], used: Mapping[str, int]
) -> bool:
    """Whether kube-scheduler's own filters would pass `node` for `pod`."""
    labels = node["metadata"].get("labels") or {}
    taints = node.get("spec", {}).get("taints") or []
    return selects(pod, labels) and tolerates(pod, taints) and fits(pod_requests(pod["spec"]), allocatable, used)


def preferred_affinity(pod: Mapping[str, Any], labels: Mapping[str, str]) -> int:
    """Sum of the weights of the pod's preferred node affinity terms that `labels` match (NodeAffinity score)."""
    affinity = (pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {}
    return sum(
        int(term.get("weight", 0))
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if all(_matches(e, labels) for e in (term.get("preference") or {}).get("matchExpressions") or [])
    )


# kube-scheduler's default weights: an extender's 0..10 score counts x10 x its weight (1 here); the
# NodeAffinity plugin's score, normalised to 0..100, counts x2.
EXTENDER_WEIGHT = 10
NODE_AFFINITY_WEIGHT = 2


def final_scores(extender: Mapping[str, int], affinity: Mapping[str, int]) -> dict[str, int]:
    """What kube-scheduler adds up per node from the extender's scores and the preferred node affinity."""
    top = max(affinity.values(), default=0)
    return {
        node: EXTENDER_WEIGHT * score + (NODE_AFFINITY_WEIGHT * 100 * affinity.get(node, 0) // top if top else 0)
        for node, score in extender.items()
    }
