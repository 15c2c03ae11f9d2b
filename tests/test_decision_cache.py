"""Decisions kept per pod shape (`webhook.mutate.plan_pod`): a kept decision is the one planning again would give,
it never outlives its context, the pod's name plays no part in it, and the cache stays bounded."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupack.core.k8s import decode_pod
from gpupack.webhook import mutate
from gpupack.webhook.mutate import DECISIONS_KEPT, MAX_SHAPE_BYTES, InvalidObject, plan_json
from tests.conftest import W, context
from tests.test_properties import POLICIES, pods


def decide(pod: dict[str, Any], ctx: mutate.MutationContext, *, fresh: bool) -> mutate.Decision | None:
    if fresh:
        mutate._DECISIONS.clear()
    try:
        return plan_json(orjson.dumps(pod), "team", ctx)
    except InvalidObject:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), policy=st.sampled_from(POLICIES), opted_in=st.booleans(), name=st.text(max_size=12))
def test_a_kept_decision_is_what_planning_again_gives_whatever_the_pods_name(
    pod: dict[str, Any], policy: str, opted_in: bool, name: str
) -> None:
    ctx = context(policy, opted_in=opted_in)
    planned = decide(pod, ctx, fresh=True)
    renamed = {**pod, "metadata": {**(pod.get("metadata") or {}), "name": name, "generateName": name[:5]}}
    kept = decide(renamed, ctx, fresh=False)  # a replica of the same template: the kept decision, if any
    again = decide(renamed, ctx, fresh=True)  # planned from scratch
    assert kept == again
    assert (planned is None) == (again is None)
    if planned is not None and again is not None:
        assert (planned.allowed, planned.ops, planned.warnings) == (again.allowed, again.ops, again.warnings)


def labelled(memory: str = "8Gi", **extra: str) -> dict[str, Any]:
    labels = {f"{W}workload": "inference", f"{W}gpu-memory": memory, **extra}
    return {"metadata": {"name": "p", "labels": labels}, "spec": {"containers": [{"name": "main", "image": "x"}]}}


def test_a_new_context_is_planned_anew() -> None:
    mutate._DECISIONS.clear()
    enforce = plan_json(orjson.dumps(labelled()), "team", context(""))
    audit = plan_json(orjson.dumps(labelled()), "team", context("mode: audit"))  # a policy reload: a new context
    assert (enforce.outcome, audit.outcome) == ("mutated", "audited")
    assert plan_json(orjson.dumps(labelled()), "team", context("")).outcome == "mutated"


def test_other_namespaces_and_other_shapes_are_planned_anew() -> None:
    ctx = context("")
    mutate._DECISIONS.clear()
    small = plan_json(orjson.dumps(labelled("4Gi")), "team", ctx)
    large = plan_json(orjson.dumps(labelled("16Gi")), "team", ctx)
    assert small.ops != large.ops
    assert plan_json(orjson.dumps(labelled()), "team", ctx).outcome == "mutated"
    assert plan_json(orjson.dumps(labelled()), "kube-system", ctx).outcome == "skipped"  # never touched
    assert plan_json(orjson.dumps(labelled()), "team", ctx).outcome == "mutated"


def test_the_cache_is_bounded_in_entries_and_in_shape_size() -> None:
    ctx = context("")
    mutate._DECISIONS.clear()
    for i in range(DECISIONS_KEPT + 10):
        plan_json(orjson.dumps(labelled(**{f"{W}team": f"t{i}"})), "team", ctx)
        assert len(mutate._DECISIONS) <= DECISIONS_KEPT
    mutate._DECISIONS.clear()
    big = labelled(**{f"example.com/l{i}": "v" * 60 for i in range(150)})
    assert len(mutate.shape_of(decode_pod(orjson.dumps(big)))) > MAX_SHAPE_BYTES
    assert plan_json(orjson.dumps(big), "team", ctx).outcome == "mutated"
    assert not mutate._DECISIONS
