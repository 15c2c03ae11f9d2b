"""Kubernetes label selectors (`matchLabels`, `matchExpressions`) against a pod's labels, as the API evaluates them
(a PodDisruptionBudget covers the pods its selector matches)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether `selector` selects `labels`. An empty selector ({}) selects everything; no selector (None), or one
    that cannot be read, selects nothing (policy/v1: a null selector matches no pods)."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            return False
        k, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(k, str):
            return False
        present = k in labels
        if operator == "In" and not (present and labels[k] in values):
            return False
        if operator == "NotIn" and present and labels[k] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True
