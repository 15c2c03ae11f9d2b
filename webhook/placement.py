"""Where a pod may run with respect to spot capacity: node affinity, node selector and the spot toleration.

Spot nodes are recognised by one label (and usually tainted, so only pods that tolerate them land there).
`forbid` adds a required node affinity excluding the label to every required term (terms are ORed, so each
must exclude it), `require` adds a node selector and the toleration, `prefer` a weighted preference and the
toleration. A pod that already says where it goes keeps its choice unless the policy enforces `spot`.
"""

from __future__ import annotations

from typing import Any, Literal

from gpupack.core.k8s import Pod
from gpupack.core.policy import Policy, SpotPlacement
from gpupack.webhook.outcome import Notes
from gpupack.webhook.patches import PatchBuilder

NODE_AFFINITY = ("spec", "affinity", "nodeAffinity")
REQUIRED = (*NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution")
PREFERRED = (*NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution")

UserChoice = Literal["require", "forbid"] | None


def _required_terms(pod: Pod) -> list[dict[str, Any]]:
    affinity = pod.spec.affinity
    if not affinity:
        return []
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return [t for t in terms if isinstance(t, dict)]


def _term_choice(term: dict[str, Any], key: str, value: str) -> UserChoice:
    for expr in term.get("matchExpressions") or []:
        if not isinstance(expr, dict) or expr.get("key") != key:
            continue
        values = expr.get("values") or []
        if expr.get("operator") == "In":
            return "require" if set(values) == {value} else ("forbid" if value not in values else None)
        if expr.get("operator") == "NotIn" and value in values:
            return "forbid"
        if expr.get("operator") == "DoesNotExist":
            return "forbid"
    return None


def user_spot_choice(pod: Pod, policy: Policy) -> UserChoice:
    """What the pod itself says about spot: it requires it, forbids it, or says nothing."""
    key, value = policy.spot.label.key, policy.spot.label.value
    selected = (pod.spec.node_selector or {}).get(key)
    if selected is not None:
        return "require" if selected == value else "forbid"
    terms = _required_terms(pod)
    if not terms:
        return None
    choices = {_term_choice(t, key, value) for t in terms}
    return choices.pop() if len(choices) == 1 else None


def _exclusion(policy: Policy) -> dict[str, Any]:
    return {"key": policy.spot.label.key, "operator": "NotIn", "values": [policy.spot.label.value]}


def _toleration(policy: Policy) -> dict[str, Any] | None:
    taint = policy.spot.taint
    if taint is None:
        return None
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


def _tolerates(pod: Pod, toleration: dict[str, Any]) -> bool:
    for t in pod.spec.tolerations or []:
        if (
            t.operator == "Exists"
            and t.key in (None, "", toleration["key"])
            and t.effect in (None, "", toleration["effect"])
        ):
            return True
        if (
            t.key == toleration["key"]
            and t.value == toleration["value"]
            and t.effect in (None, "", toleration["effect"])
        ):
            return True
    return False


def _add_toleration(pod: Pod, builder: PatchBuilder, policy: Policy, notes: Notes) -> None:
    toleration = _toleration(policy)
    if toleration is not None and not _tolerates(pod, toleration):
        builder.append(("spec", "tolerations"), toleration)
        notes.add("spot", f"tolerates the spot taint {toleration['key']}={toleration['value']}")


def _forbid(pod: Pod, builder: PatchBuilder, policy: Policy, notes: Notes) -> None:
    expr = _exclusion(policy)
    label = f"{policy.spot.label.key}={policy.spot.label.value}"
    terms = _required_terms(pod)
    if not terms:
        builder.set(REQUIRED[:-1], REQUIRED[-1], {"nodeSelectorTerms": [{"matchExpressions": [expr]}]})
    for index, term in enumerate(terms):
        if expr not in (term.get("matchExpressions") or []):
            builder.append((*REQUIRED, "nodeSelectorTerms", index, "matchExpressions"), expr)
    notes.add("spot", f"required node affinity: never on spot nodes ({label})")


def place(pod: Pod, builder: PatchBuilder, policy: Policy, mode: SpotPlacement, why: str, notes: Notes) -> None:
    """Add the intents that put the pod on, near or away from spot nodes, as `mode` says."""
    key, value = policy.spot.label.key, policy.spot.label.value
    user = user_spot_choice(pod, policy)
    enforced = policy.enforces("spot")
    if mode == "forbid":
        if user == "forbid":
            return
        if user == "require":
            if not enforced:
                notes.add("conflict", f"pod selects spot nodes, kept; policy forbids spot for {why}")
                return
            builder.remove(("spec", "nodeSelector"), key)
            notes.add("conflict", f"pod selected spot nodes; the policy enforces no spot for {why}")
        _forbid(pod, builder, policy, notes)
        return
    if mode == "require":
        if user == "forbid" and not enforced:
            notes.add("conflict", f"pod excludes spot nodes, kept; policy requires spot for {why}")
            return
        if user != "require":
            builder.set(("spec", "nodeSelector"), key, value)
            notes.add("spot", f"node selector {key}={value}: runs on spot nodes ({why})")
        _add_toleration(pod, builder, policy, notes)
        return
    # prefer: a soft choice, so any explicit choice of the pod stands without conflict.
    if user == "forbid":
        return
    if user is None:
        preference = {
            "weight": policy.spot.prefer_weight,
            "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]},
        }
        existing = ((pod.spec.affinity or {}).get("nodeAffinity") or {}).get(PREFERRED[-1]) or []
        if preference not in existing:
            builder.append(PREFERRED, preference)
            notes.add("spot", f"prefers spot nodes ({key}={value}, weight {policy.spot.prefer_weight})")
    _add_toleration(pod, builder, policy, notes)
