"""Pods no cluster would keep, as a hostile or careless client can still send them (webhooks run before
validation): refused by name and bound instead of seconds of planning, the namespace the API server says,
and the GPU container chosen sensibly."""

from __future__ import annotations

import asyncio
import functools
import io
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.jsonbound import json_values_bound
from gpupack.core.kube import ClusterFactsCache
from gpupack.core.policy_store import PolicyStore
from gpupack.testing.shapes import SHAPES, largest
from gpupack.webhook import bounds
from gpupack.webhook.app import make_app
from gpupack.webhook.mutate import plan
from tests.conftest import W, admission_review, context, loaded, make_pod

LABELLED = {W + "workload": "inference"}
SHAPE_NAMES = list(SHAPES)


@functools.cache
def _largest_body(shape: str) -> bytes:
    """The largest review of one shape, built once per test session (it takes a few hundred ms)."""
    return orjson.dumps(largest(SHAPES[shape][0], LABELLED))


@functools.cache
def _plannable() -> bytes:
    """A 2.5 MB review within every bound: 128 containers with 200 environment variables each."""
    pod = make_pod(dict(LABELLED))
    env = [{"name": f"E{i}", "value": "x" * 80} for i in range(200)]
    pod["spec"]["containers"] = [{"name": f"c{i}", "image": "i", "env": env} for i in range(bounds.MAX_CONTAINERS)]
    return orjson.dumps(admission_review(pod))


@pytest.mark.parametrize("shape", SHAPE_NAMES)
async def test_the_largest_review_of_each_shape_is_refused_by_name_with_a_small_answer(
    aiohttp_client: Any, shape: str
) -> None:
    """171,000 containers took 3.9 s to plan and a 23.8 MB answer, while every other admission waited. Now a
    review of more than MAX_REVIEW_VALUES JSON values is refused undecoded (413, naming the count), and one
    within it but beyond a bound of the pod is denied naming that bound."""
    named = SHAPES[shape][1]
    app = make_app(PolicyStore(None, loaded("")), ClusterFactsCache(None), CollectorRegistry())
    client = await aiohttp_client(app)
    body = _largest_body(shape)
    response = await client.post("/mutate", data=io.BytesIO(body))
    raw = await response.read()
    assert len(raw) < 2048
    if json_values_bound(body) > bounds.MAX_REVIEW_VALUES:
        assert response.status == 413 and b"JSON values" in raw
        return
    answer = orjson.loads(raw)["response"]
    assert response.status == 200 and answer["allowed"] is False
    assert named in answer["status"]["message"] and "at most" in answer["status"]["message"]


def test_the_value_count_is_a_bound_on_what_a_3_mib_review_can_hold() -> None:
    """Most of the largest shapes are refused by the count alone; the rest by a bound of the pod."""
    counts = {name: json_values_bound(_largest_body(name)) for name in SHAPES}
    assert sum(count > bounds.MAX_REVIEW_VALUES for count in counts.values()) >= len(counts) // 2


async def test_a_large_review_within_every_bound_is_planned(aiohttp_client: Any) -> None:
    """A pod of 128 containers with 200 environment variables each: 77,000 values, 2.5 MB, a real (if unusual)
    pod: decoded, planned, and mutated."""
    body = _plannable()
    assert len(body) > 2_000_000 and json_values_bound(body) < bounds.MAX_REVIEW_VALUES
    app = make_app(PolicyStore(None, loaded("")), ClusterFactsCache(None), CollectorRegistry())
    client = await aiohttp_client(app)
    response = await client.post("/mutate", data=io.BytesIO(body))
    answer = (await response.json())["response"]
    assert response.status == 200 and answer["allowed"] and "patch" in answer


def test_in_audit_mode_a_pod_too_large_is_admitted_with_a_would_refuse_warning() -> None:
    pod = make_pod(dict(LABELLED))
    pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(bounds.MAX_CONTAINERS + 1)]
    decision = plan(pod, "team-a", context("mode: audit"))
    assert decision.allowed and decision.outcome == "audited" and decision.ops == []
    assert decision.warnings[0].startswith("gpupack audit, would refuse: the pod has 129 spec.containers")


def test_a_pod_that_did_not_ask_is_left_alone_when_too_large() -> None:
    """An opted-in namespace's pod without the label (`failurePolicy: Ignore`): admitted unchanged, warned."""
    pod = make_pod()
    pod["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(bounds.MAX_TOLERATIONS + 1)]
    decision = plan(pod, "team-a", context(opted_in=True))
    assert decision.allowed and decision.outcome == "skipped" and decision.ops == []
    assert "left unchanged" in decision.warnings[0]


def test_a_pod_at_every_bound_is_planned_as_usual() -> None:
    pod = make_pod(dict(LABELLED))
    pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(bounds.MAX_CONTAINERS)]
    pod["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(bounds.MAX_TOLERATIONS)]
    pod["metadata"]["labels"].update({f"l{i}": "v" for i in range(bounds.MAX_LABELS - len(LABELLED))})
    decision = plan(pod, "team-a", context())
    assert decision.allowed and decision.outcome == "mutated"
    touched = {op["path"].split("/")[3] for op in decision.ops if op["path"].startswith("/spec/containers/")}
    assert len(touched) == bounds.MAX_CONTAINERS  # every container got its requests


def test_a_huge_label_value_is_quoted_short() -> None:
    decision = plan(make_pod({**LABELLED, W + "gpu-memory": "9" * 1_000_000 + "x"}), "team-a", context())
    assert not decision.allowed and len(decision.message) < 300 and "gpupack.io/gpu-memory" in decision.message


@pytest.mark.parametrize(
    ("request_ns", "object_ns", "touched"),
    [
        ("kube-system", "team-a", False),  # the object claims another namespace: the request's counts
        ("team-a", "kube-system", True),
        ("gpupack-system", None, False),
        (None, "kube-system", False),  # no namespace in the request (an offline preview): the object's
    ],
)
def test_the_requests_namespace_decides_which_namespaces_are_never_touched(
    request_ns: str | None, object_ns: str | None, touched: bool
) -> None:
    pod = make_pod(dict(LABELLED))
    if object_ns is None:
        del pod["metadata"]["namespace"]
    else:
        pod["metadata"]["namespace"] = object_ns
    decision = plan(pod, request_ns, context())
    assert (decision.outcome == "mutated") is touched


async def test_the_namespace_comes_from_the_review_on_the_wire(aiohttp_client: Any) -> None:
    app = make_app(PolicyStore(None, loaded("")), ClusterFactsCache(None), CollectorRegistry())
    client = await aiohttp_client(app)
    review = admission_review(make_pod(dict(LABELLED), namespace="team-a"))
    review["request"]["namespace"] = "kube-system"
    response = await client.post("/mutate", data=orjson.dumps(review))
    answer = (await response.json())["response"]
    assert answer["allowed"] and "patch" not in answer


def test_the_gpu_annotation_may_not_name_a_plain_init_container() -> None:
    """It put the GPU on a container that exits before the app starts, while the app kept its own GPU."""
    pod = make_pod(
        dict(LABELLED),
        annotations={W + "container": "fetch-model"},
        containers=[{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        initContainers=[{"name": "fetch-model", "image": "i"}],
    )
    decision = plan(pod, "team-a", context())
    assert not decision.allowed
    assert "gpupack.io/container='fetch-model'" in decision.message and "init container" in decision.message


def test_the_gpu_annotation_may_name_a_sidecar() -> None:
    pod = make_pod(
        dict(LABELLED),
        annotations={W + "container": "proxy"},
        initContainers=[{"name": "proxy", "image": "i", "restartPolicy": "Always"}],
    )
    decision = plan(pod, "team-a", context())
    assert decision.allowed
    assert any(op["path"].startswith("/spec/initContainers/0/resources") and "mig" in str(op) for op in decision.ops)


async def test_large_reviews_are_taken_one_at_a_time_and_small_ones_pass_them(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MiB review decodes to 25-95 MB of objects: two at once would take the webhook past its 256 Mi limit.
    While one is being handled, the next waits (here: the test holds the turn), and small reviews go on."""
    import gpupack.webhook.app
    from gpupack.webhook.app import STATE, WebhookSettings

    monkeypatch.setattr(gpupack.webhook.app, "LARGE_WAIT_SECONDS", 0.5)
    app = make_app(PolicyStore(None, loaded("")), ClusterFactsCache(None), CollectorRegistry(), WebhookSettings())
    client = await aiohttp_client(app)
    large = _plannable()
    small = orjson.dumps(admission_review(make_pod(dict(LABELLED))))
    turn = app[STATE].large
    await turn.acquire()
    waiting = asyncio.create_task(client.post("/mutate", data=io.BytesIO(large)))
    await asyncio.sleep(0.1)
    passing = await client.post("/mutate", data=small)
    assert passing.status == 200 and not waiting.done()
    turn.release()
    answered = await waiting
    assert answered.status == 200 and (await answered.json())["response"]["allowed"] is True

    await turn.acquire()  # held for longer than a review may wait: the waiting review is told to come back
    refused = await client.post("/mutate", data=io.BytesIO(large))
    turn.release()
    assert refused.status == 503 and "another large admission review" in await refused.text()


async def test_a_client_trickling_a_large_body_holds_up_no_other_review(aiohttp_client: Any) -> None:
    """It holds one of the places for large bodies while it sends; others are read, decoded and answered."""
    app = make_app(PolicyStore(None, loaded("")), ClusterFactsCache(None), CollectorRegistry())
    client = await aiohttp_client(app)
    _reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n{")
    await writer.drain()
    await asyncio.sleep(0.1)
    answered = await client.post("/mutate", data=io.BytesIO(_plannable()))
    assert answered.status == 200 and (await answered.json())["response"]["allowed"] is True
    small = await client.post("/mutate", data=orjson.dumps(admission_review(make_pod(dict(LABELLED)))))
    assert small.status == 200
    writer.close()
