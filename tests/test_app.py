"""The webhook's HTTP layer through aiohttp's test client: routes, error mapping, dry run, metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

import gpupack.webhook.app
from gpupack.core.kube import ClusterFactsCache
from gpupack.core.policy_store import PolicyStore
from gpupack.webhook.app import WebhookSettings, make_app
from tests.conftest import W, admission_review, loaded, make_pod

Client = TestClient[web.Request, web.Application]


def app(doc: str = "", settings: WebhookSettings | None = None) -> web.Application:
    return make_app(PolicyStore(None, loaded(doc)), ClusterFactsCache(None), CollectorRegistry(), settings)


async def post(client: Client, body: Any, path: str = "/mutate") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    resp = await client.post(f"{path}?timeout=5s", data=data, headers={"Content-Type": "application/json"})
    text = await resp.text()
    return resp.status, json.loads(text) if text else None


async def test_opted_in_pod_gets_a_base64_json_patch(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    review = admission_review(make_pod({W + "workload": "inference"}), uid="u-1")
    status, body = await post(client, review)
    assert status == 200
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert ops[0] == {
        "op": "add",
        "path": "/spec/containers/0/resources",
        "value": {"requests": {"nvidia.com/mig-1g.10gb": "1"}},
    }
    assert response["warnings"] and response["auditAnnotations"]["changes"]


async def test_denial_carries_code_400_and_the_label(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    status, body = await post(client, admission_review(make_pod({W + "workload": "inference", W + "gpus": "-1"})))
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 400 and "gpupack.io/gpus" in response["status"]["message"]


async def test_opted_in_namespace_path_applies_the_default_class(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    pod = make_pod(containers=[{"name": "m", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}])
    _, on_label_path = await post(client, admission_review(pod))
    _, on_namespace_path = await post(client, admission_review(pod), "/mutate/opted-in-namespace")
    assert "patch" not in on_label_path["response"]
    assert "patch" in on_namespace_path["response"]


async def test_dry_run_gets_the_same_answer(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    pod = make_pod({W + "workload": "batch"})
    _, wet = await post(client, admission_review(pod, uid="same"))
    _, dry = await post(client, admission_review(pod, dry_run=True, uid="same"))
    assert wet == dry


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"kind": {"kind": "Pod"}, "operation": "CREATE"},
            },
            "request.uid",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "kind": {"kind": "Pod"},
                    "operation": "CREATE",
                    "object": {"spec": {"containers": 3}},
                },
            },
            "request.object.spec.containers",
        ),
    ],
)
async def test_bad_bodies_get_400_naming_the_problem(aiohttp_client: Any, body: Any, expected: str) -> None:
    client = await aiohttp_client(app())
    status, payload = await post(client, body)
    assert status == 400 and expected in payload["error"]


async def test_oversized_body_gets_413(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app(settings=WebhookSettings(max_body_bytes=10_000)))
    pod = make_pod({W + "workload": "inference"}, {"big": "x" * 20_000})
    status, payload = await post(client, admission_review(pod))
    assert status == 413 and "10000-byte limit" in payload["error"]


async def test_slow_body_is_cut_off_with_408(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app(settings=WebhookSettings(body_timeout=0.2)))

    async def trickle() -> Any:
        yield b'{"apiVersion":'
        await asyncio.sleep(2)
        yield b'"admission.k8s.io/v1"}'

    resp = await client.post("/mutate", data=trickle())
    assert resp.status == 408


async def test_other_kinds_and_operations_are_admitted_untouched(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    review = admission_review(make_pod({W + "workload": "inference"}))
    review["request"]["operation"] = "UPDATE"
    _, body = await post(client, review)
    assert body["response"] == {"uid": review["request"]["uid"], "allowed": True}


async def test_handler_error_is_logged_with_uid_and_never_a_500(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*_args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(gpupack.webhook.app, "plan_json", explode)
    client = await aiohttp_client(app())
    with caplog.at_level(logging.ERROR):
        status, body = await post(client, admission_review(make_pod({W + "workload": "inference"}), uid="uid-42"))
    assert status == 200
    assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 500
    assert "uid-42" in body["response"]["status"]["message"]
    assert any(getattr(r, "uid", None) == "uid-42" for r in caplog.records)


async def test_metrics_count_admissions_mutations_and_latency(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    await post(client, admission_review(make_pod({W + "workload": "training"})))
    await post(client, admission_review(make_pod({W + "workload": "bogus"})))
    await post(client, b"{}")
    text = await (await client.get("/metrics")).text()
    assert 'gpupack_webhook_admissions_total{dry_run="false",outcome="mutated",workload="training"} 1.0' in text
    assert 'gpupack_webhook_admissions_total{dry_run="false",outcome="denied",workload="none"} 1.0' in text
    assert 'gpupack_webhook_mutations_total{kind="gpu",mode="enforce"} 1.0' in text
    assert 'gpupack_webhook_bad_requests_total{reason="not_admission_review"} 1.0' in text
    assert "gpupack_webhook_admission_duration_seconds_count 2.0" in text


async def test_without_api_access_gpu_pods_stay_on_the_default_scheduler_and_are_counted(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    _, body = await post(client, admission_review(make_pod({W + "workload": "inference"})))
    assert (
        "gpupack: gpupack-scheduler has no live leader (no API access to read the lease): left on "
        + ("default-scheduler, not packed")
        in body["response"]["warnings"]
    )
    text = await (await client.get("/metrics")).text()
    assert 'gpupack_webhook_unrouted_total{reason="unreadable"} 1.0' in text


async def test_health_and_readiness(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app())
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
