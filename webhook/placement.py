"""Where a pod may run with respect to spot capacity: node affinity and the spot tolerations.

Spot nodes are recognised by any of several labels (`policy.spot.recognised`: Karpenter's, the clouds' own and the
cluster's), and some are tainted, so only pods that tolerate them land there. Node affinity says it for every label:

- `forbid`: every required term gets `NotIn` for each recognised key (terms are ORed, so each must exclude spot; a
  node without the key passes `NotIn`);
- `require`: the required terms become one per recognised key (`In` its spot values) times each term the pod already
  has, since a node selector cannot say "any of these"; the Karpenter term first, as Karpenter tries the terms in
  order (kubernetes-sigs/karpenter `scheduling/preferences.go`, `removeRequiredNodeAffinityTerm`);
- `prefer`: one weighted preferred term per recognised key.

`require` and `prefer` pods tolerate every recognised spot taint (`policy.spot.tolerated`). A pod that already
says where it goes keeps its choice unless the policy enforces `spot`.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from gpupack.core.k8s import Pod
from gpupack.core.policy import Policy, SpotPlacement
from gpupack.core.spot import by_key
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


def _expression_choice(expr: dict[str, Any], spot_values: list[str]) -> UserChoice:
    """What one match expression on a spot label key says: spot only, no spot, or neither."""
    values = set(expr.get("values") or [])
    operator = expr.get("operator")
    if operator == "In":
        if values and values <= set(spot_values):
            return "require"
        return "forbid" if not values & set(spot_values) else None
    if operator == "NotIn" and values & set(spot_values):
        return "forbid"
    if operator == "DoesNotExist":
        return "forbid"
    return None


def _term_choice(term: dict[str, Any], spot: dict[str, list[str]]) -> UserChoice:
    """What one required term says of spot: the first expression on a recognised key that says anything."""
    for expr in term.get("matchExpressions") or []:
        if isinstance(expr, dict) and expr.get("key") in spot:
            choice = _expression_choice(expr, spot[expr["key"]])
            if choice is not None:
                return choice
    return None


def user_spot_choice(pod: Pod, policy: Policy) -> UserChoice:
    """What the pod itself says about spot, by any recognised label: it requires it, forbids it, or says nothing.
    A node selector on a recognised key decides (a spot value requires spot, another value forbids it); else the
    required node affinity, when all its terms say the same."""
    spot = by_key(policy.spot.recognised)
    selected = {k: v for k, v in (pod.spec.node_selector or {}).items() if k in spot}
    if any(v in spot[k] for k, v in selected.items()):
        return "require"
    if selected:
        return "forbid"
    terms = _required_terms(pod)
    if not terms:
        return None
    choices = {_term_choice(t, spot) for t in terms}
    return choices.pop() if len(choices) == 1 else None


def _exclusions(policy: Policy) -> list[dict[str, Any]]:
    return [{"key": k, "operator": "NotIn", "values": v} for k, v in by_key(policy.spot.recognised).items()]


def _selections(policy: Policy) -> list[dict[str, Any]]:
    return [{"key": k, "operator": "In", "values": v} for k, v in by_key(policy.spot.recognised).items()]


def tolerates(pod: Pod, toleration: dict[str, Any]) -> bool:
    """Whether one of the pod's tolerations already covers `toleration` (same key and value, or `Exists`)."""
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


def _spot_labels_text(policy: Policy) -> str:
    """The recognised spot labels in a few words: the cluster's own, and the well-known ones as a group."""
    own = ", ".join(f"{label.key}={label.value}" for label in policy.spot.labels)
    if not policy.spot.well_known:
        return own
    return f"{own}, or Karpenter's or a cloud's spot label" if own else "Karpenter's or a cloud's spot label"


def _add_tolerations(pod: Pod, builder: PatchBuilder, policy: Policy, notes: Notes) -> None:
    own = {(t.key, t.value, t.effect) for t in policy.spot.taints}
    named, clouds = [], 0
    for key, value, effect in policy.spot.tolerated:
        toleration = {"key": key, "operator": "Equal", "value": value, "effect": effect}
        if not tolerates(pod, toleration):
            builder.append(("spec", "tolerations"), toleration)
            if (key, value, effect) in own:
                named.append(f"{key}={value}")
            else:
                clouds += 1
    if named or clouds:
        words = [", ".join(named)] if named else []
        words += ["the clouds' spot taints"] if clouds else []
        notes.add("spot", f"tolerates {' and '.join(words)}")


def _excluding(terms: list[dict[str, Any]], policy: Policy) -> list[dict[str, Any]]:
    """Each term with every spot exclusion it lacks (one term of exclusions when there are none)."""
    exclusions = _exclusions(policy)
    out = []
    for term in terms or [{}]:
        rewritten = copy.deepcopy(term)
        own = rewritten.get("matchExpressions") or []
        rewritten["matchExpressions"] = [*own, *(e for e in exclusions if e not in own)]
        out.append(rewritten)
    return out


def _selecting(terms: list[dict[str, Any]], policy: Policy) -> list[dict[str, Any]]:
    """Each term (or an empty one) with each recognised spot selection: the pod's own terms AND any spot label."""
    out = []
    for selection in _selections(policy):
        for term in terms or [{}]:
            combined = copy.deepcopy(term)
            combined["matchExpressions"] = [*(combined.get("matchExpressions") or []), selection]
            out.append(combined)
    return out


def _set_terms(builder: PatchBuilder, terms: list[dict[str, Any]]) -> None:
    builder.set(REQUIRED[:-1], REQUIRED[-1], {"nodeSelectorTerms": terms})


def _cleared(pod: Pod, builder: PatchBuilder, policy: Policy, against: UserChoice) -> list[dict[str, Any]]:
    """The policy enforces spot against the pod's own choice (`against`): the node selector entries on a
    recognised key go, and the expressions saying `against` leave the pod's required terms. Returns the terms
    left (an emptied term is dropped, as it would match every node)."""
    spot = by_key(policy.spot.recognised)
    for key in pod.spec.node_selector or {}:
        if key in spot:
            builder.remove(("spec", "nodeSelector"), key)
    out = []
    for term in _required_terms(pod):
        kept = [
            e
            for e in term.get("matchExpressions") or []
            if not (isinstance(e, dict) and e.get("key") in spot and _expression_choice(e, spot[e["key"]]) == against)
        ]
        rewritten = {**copy.deepcopy(term), "matchExpressions": kept}
        if not kept:
            del rewritten["matchExpressions"]
        if rewritten:
            out.append(rewritten)
    return out


def _forbid(pod: Pod, builder: PatchBuilder, policy: Policy, notes: Notes) -> None:
    terms = _required_terms(pod)
    if not terms:
        _set_terms(builder, _excluding([], policy))
    exclusions = _exclusions(policy)
    for index, term in enumerate(terms):
        for expr in exclusions:
            if expr not in (term.get("matchExpressions") or []):
                builder.append((*REQUIRED, "nodeSelectorTerms", index, "matchExpressions"), expr)
    notes.add("spot", f"required node affinity: never on spot nodes ({_spot_labels_text(policy)})")


def _require(terms: list[dict[str, Any]], builder: PatchBuilder, policy: Policy, why: str, notes: Notes) -> None:
    """Required terms: each of `terms` (or an empty one) with each recognised spot selection."""
    _set_terms(builder, _selecting(terms, policy))
    notes.add("spot", f"required node affinity: runs on spot nodes ({why}): {_spot_labels_text(policy)}")


def _prefer(pod: Pod, builder: PatchBuilder, policy: Policy, notes: Notes) -> None:
    existing = ((pod.spec.affinity or {}).get("nodeAffinity") or {}).get(PREFERRED[-1]) or []
    weight = policy.spot.prefer_weight
    added = False
    for selection in _selections(policy):
        preference = {"weight": weight, "preference": {"matchExpressions": [selection]}}
        if preference not in existing:
            builder.append(PREFERRED, preference)
            added = True
    if added:
        notes.add("spot", f"prefers spot nodes (weight {weight}): {_spot_labels_text(policy)}")


def place(pod: Pod, builder: PatchBuilder, policy: Policy, mode: SpotPlacement, why: str, notes: Notes) -> bool:
    """Add the intents that put the pod on, near or away from spot nodes, as `mode` says. Returns False when the
    pod's own contrary choice was kept instead (nothing enforced), True when `mode` stands."""
    user = user_spot_choice(pod, policy)
    enforced = policy.enforces("spot")
    if mode == "forbid":
        if user == "forbid":
            return True
        if user == "require":
            if not enforced:
                notes.add("conflict", f"pod selects spot nodes, kept; policy forbids spot for {why}")
                return False
            notes.add("conflict", f"pod selected spot nodes; the policy enforces no spot for {why}")
            _set_terms(builder, _excluding(_cleared(pod, builder, policy, "require"), policy))
            return True
        _forbid(pod, builder, policy, notes)
        return True
    if mode == "require":
        if user == "forbid":
            if not enforced:
                notes.add("conflict", f"pod excludes spot nodes, kept; policy requires spot for {why}")
                return False
            notes.add("conflict", f"pod excluded spot nodes; the policy enforces spot for {why}")
            _require(_cleared(pod, builder, policy, "forbid"), builder, policy, why, notes)
        elif user != "require":
            _require(_required_terms(pod), builder, policy, why, notes)
        _add_tolerations(pod, builder, policy, notes)
        return True
    # prefer: a soft choice, so any explicit choice of the pod stands without conflict.
    if user == "forbid":
        return False
    if user is None:
        _prefer(pod, builder, policy, notes)
    _add_tolerations(pod, builder, policy, notes)
    return True
