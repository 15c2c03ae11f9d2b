"""The webhook reads a review by decoding only what gpupack reads, and falls back to decoding the whole body when
that fails: both ways give the same review, the same decision, and for malformed input the same named error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupack.webhook.mutate import InvalidObject, MutationContext, plan, plan_json
from gpupack.webhook.review import BadReview, _decode_whole, parse_review
from tests.conftest import (
    ADMISSION,
    RECORDED_POLICY,
    W,
    admission_review,
    context,
    make_pod,
    recorded_facts,
    recorded_text,
)
from tests.test_properties import POLICIES, json_value, pods

RECORDED = sorted(ADMISSION.glob("*.json"))


def both(raw: Any, namespace: str | None, ctx: MutationContext) -> tuple[Any, Any]:
    """`plan()` of the object and `plan_json()` of its text: each a Decision or the InvalidObject message."""
    answers = []
    for decide in (lambda: plan(raw, namespace, ctx), lambda: plan_json(orjson.dumps(raw), namespace, ctx)):
        try:
            answers.append(decide())
        except InvalidObject as exc:
            answers.append(f"InvalidObject: {exc}")
    return answers[0], answers[1]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_the_envelope_decoded_alone_is_the_envelope_decoded_whole(path: Path) -> None:
    body = recorded_text(path).encode()
    fast, whole = parse_review(body), _decode_whole(body)
    assert fast.request.uid == whole.request.uid and fast.request.kind == whole.request.kind
    assert (fast.api_version, fast.request.operation, fast.request.namespace, fast.request.dry_run) == (
        whole.api_version,
        whole.request.operation,
        whole.request.namespace,
        whole.request.dry_run,
    )
    assert orjson.loads(memoryview(fast.request.object)) == json.loads(body)["request"]["object"]
    assert orjson.loads(memoryview(whole.request.object)) == json.loads(body)["request"]["object"]


@pytest.mark.parametrize("opted_in", [False, True])
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_a_recorded_pod_read_from_its_text_gets_the_decision_of_plan(path: Path, opted_in: bool) -> None:
    request = json.loads(recorded_text(path))["request"]
    ctx = context(RECORDED_POLICY, recorded_facts(), opted_in=opted_in)
    decided, read = both(request["object"], request["namespace"], ctx)
    assert read == decided and not isinstance(read, str)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), policy=st.sampled_from(POLICIES), opted_in=st.booleans())
def test_any_pod_read_from_its_text_gets_the_decision_of_plan(pod: dict[str, Any], policy: str, opted_in: bool) -> None:
    decided, read = both(pod, "team", context(policy, opted_in=opted_in))
    assert read == decided


PLACES = [
    ("metadata",),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "name"),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests"),
    ("spec", "initContainers"),
    ("spec", "tolerations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "priority"),
    ("spec", "schedulerName"),
]


def _put(pod: dict[str, Any], place: tuple[str | int, ...], value: Any) -> None:
    node: Any = pod
    for token in place[:-1]:
        node = node[token]
    node[place[-1]] = value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    place=st.sampled_from(PLACES),
    value=json_value,
    namespace=st.sampled_from(["team", "kube-system"]),
    labelled=st.booleans(),
    tolerations=st.integers(0, 300),
)
def test_a_pod_of_the_wrong_shape_gets_from_its_text_what_plan_says(
    place: tuple[str | int, ...], value: Any, namespace: str, labelled: bool, tolerations: int
) -> None:
    """Never touched, too large, or the field named: the fallback decides in plan's order."""
    pod = make_pod({W + "workload": "inference"} if labelled else {})
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    pod["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(tolerations)]
    pod["spec"]["affinity"] = {"nodeAffinity": {}}
    _put(pod, place, value)
    decided, read = both(pod, namespace, context(opted_in=True))
    assert read == decided


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"spec": {"containers": 3}}, "InvalidObject: request.object.spec.containers: Expected `array`, got `int`"),
        ({"spec": {"containers": []}}, "InvalidObject: request.object.spec.containers: Expected `array` of length"),
        ({"spec": {"containers": [{}]}}, "InvalidObject: request.object.spec.containers[0].name: Field required"),
        ({"metadata": {"labels": {W + "workload": 5}}, "spec": {"containers": [{"name": "m"}]}}, "metadata.labels"),
        ({"spec": {"containers": [{"name": "m"}], "affinity": {"nodeAffinity": 5}}}, "nodeAffinity must be an"),
        ([], "InvalidObject: request.object must be a Pod object"),
        (None, "InvalidObject: request.object must be a Pod object"),
    ],
)
def test_a_malformed_pod_is_named_the_same_both_ways(raw: Any, expected: str) -> None:
    decided, read = both(raw, "team", context())
    assert read == decided
    assert isinstance(read, str) and expected in read


MALFORMED = [
    ("apiVersion", lambda r: r.update(apiVersion="admission.k8s.io/v1beta1"), "apiVersion: Invalid enum value"),
    ("kind", lambda r: r.update(kind="Pod"), "kind: Invalid enum value 'Pod'"),
    ("uid missing", lambda r: r["request"].pop("uid"), "request.uid: Field required"),
    ("uid empty", lambda r: r["request"].update(uid=""), "request.uid: Expected `str` of length >= 1"),
    ("uid a number", lambda r: r["request"].update(uid=7), "request.uid: Expected `str`, got `int`"),
    ("operation", lambda r: r["request"].update(operation="PATCH"), "request.operation: Invalid enum value"),
    ("kind.kind", lambda r: r["request"]["kind"].pop("kind"), "request.kind.kind: Field required"),
    ("namespace", lambda r: r["request"].update(namespace=3), "request.namespace: Expected `str | null`"),
    ("dryRun", lambda r: r["request"].update(dryRun=[1]), "request.dryRun: Expected `bool | null`, got `array`"),
    ("request", lambda r: r.update(request=[]), "request: Expected `object`, got `array`"),
]


@pytest.mark.parametrize(("case", "breaks", "named"), MALFORMED, ids=[c for c, _, _ in MALFORMED])
def test_a_malformed_review_is_refused_naming_the_field(case: str, breaks: Any, named: str) -> None:
    data = admission_review(make_pod({W + "workload": "inference"}))
    breaks(data)
    with pytest.raises(BadReview) as caught:
        parse_review(json.dumps(data).encode())
    assert str(caught.value).startswith(f"not an AdmissionReview v1: {named}")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{nope", "the body is not JSON"),
        (b"[1, 2]", "the body must be a JSON object (an AdmissionReview)"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\xff"}}', "not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}", "not JSON"),
    ],
)
def test_a_body_that_is_not_json_is_refused_as_such(body: bytes, named: str) -> None:
    with pytest.raises(BadReview, match=named.replace("(", r"\(").replace(")", r"\)")):
        parse_review(body)


def test_the_object_stays_text_until_the_planner_reads_it() -> None:
    review = parse_review(orjson.dumps(admission_review(make_pod({W + "workload": "inference"}))))
    assert isinstance(review.request.object, msgspec.Raw)
    assert orjson.loads(memoryview(review.request.object))["metadata"]["labels"] == {W + "workload": "inference"}
