"""The webhook as deployed (`build_app` with a kubeconfig) against an HTTP-level fake API server serving the gpupack
scheduler's Lease, fed AdmissionReviews recorded from a real v1.36 API server: a live Lease routes GPU pods to
gpupack-scheduler; an expired, missing or unreadable one leaves them on default-scheduler with a warning, the
metric and a log line that says why; a pod's own schedulerName is kept unless the policy enforces it."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from gpupack.core.server import ServeOptions
from gpupack.demo.cluster import leader_lease
from gpupack.testing.apiserver import FakeApiServer, write_kubeconfig
from gpupack.webhook.service import WebhookConfig, build_app
from tests.conftest import RECORDED_POLICY, recorded_api_server, recorded_review

Client = TestClient[web.Request, web.Application]
KEY = ("gpupack-system", "gpupack-scheduler")
INFER = "000-mutate-llm-infer-7b-abc12"
ROUTED = {"op": "replace", "path": "/spec/schedulerName", "value": "gpupack-scheduler"}


@pytest.fixture
async def fake_api(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = recorded_api_server()
    server = await aiohttp_server(fake.app())
    yield fake, write_kubeconfig(tmp_path / "kubeconfig", server.port)


async def webhook(aiohttp_client: Any, kubeconfig: Path, doc: str = "") -> tuple[Client, CollectorRegistry]:
    """The webhook app, started: its first reads of the API (cluster facts, the Lease) are done before it serves."""
    policy = kubeconfig.with_name("policy.yaml")
    policy.write_text(RECORDED_POLICY.decode() + doc)
    registry = CollectorRegistry()
    app = build_app(WebhookConfig(policy, ServeOptions(), kubeconfig=kubeconfig), registry)
    return await aiohttp_client(app), registry


async def admit(client: Client, review: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response and its decoded patch."""
    resp = await client.post("/mutate?timeout=5s", json=review)
    assert resp.status == 200
    response: dict[str, Any] = (await resp.json())["response"]
    return response, json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def live_lease() -> dict[str, Any]:
    """Renewed now, held an hour: live for the whole test without depending on how long it takes."""
    return leader_lease(*KEY, time.time(), duration=3600)


def unrouted(registry: CollectorRegistry, reason: str) -> float | None:
    return registry.get_sample_value("gpupack_webhook_unrouted_total", {"reason": reason})


async def test_a_live_lease_routes_gpu_pods_to_the_gpupack_scheduler(
    aiohttp_client: Any, fake_api: tuple[FakeApiServer, Path]
) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = live_lease()
    client, registry = await webhook(aiohttp_client, kubeconfig)
    review = recorded_review(INFER)
    response, ops = await admit(client, review)
    assert ROUTED in ops
    assert "gpupack: schedulerName gpupack-scheduler: scheduled with the gpupack extender" in response["warnings"]
    patched = jsonpatch.apply_patch(review["request"]["object"], ops)
    kubernetes_validate.validate(patched, kubernetes_validate.latest_version(), strict=True)
    assert registry.get_sample_value("gpupack_webhook_mutations_total", {"kind": "scheduler", "mode": "enforce"}) == 1
    assert registry.get_sample_value("gpupack_scheduler_lease_live", {"lease": "gpupack-system/gpupack-scheduler"}) == 1
    assert unrouted(registry, "expired") == 0  # the series exists from the start (the alert needs it), at 0


DEAD = [
    # (what the fake API server has, reason, the warning's words)
    ("expired", "expired", "(lease expired "),
    ("missing", "missing", "(lease not found)"),
    ("forbidden", "unreadable", "(lease unreadable: HTTP 403)"),
]


@pytest.mark.parametrize(("served", "reason", "words"), DEAD)
async def test_a_dead_or_unreadable_lease_leaves_gpu_pods_on_the_default_scheduler_and_says_why(
    aiohttp_client: Any,
    fake_api: tuple[FakeApiServer, Path],
    caplog: pytest.LogCaptureFixture,
    served: str,
    reason: str,
    words: str,
) -> None:
    fake, kubeconfig = fake_api
    if served == "expired":
        fake.leases[KEY] = leader_lease(*KEY, time.time() - 3600)
    fake.lease_forbidden = served == "forbidden"
    client, registry = await webhook(aiohttp_client, kubeconfig)
    review = recorded_review(INFER)
    with caplog.at_level(logging.WARNING, "gpupack.webhook.unrouted"):
        response, ops = await admit(client, review)
        await admit(client, recorded_review("001-mutate-bert-batch"))
    assert not any(op["path"] == "/spec/schedulerName" for op in ops)
    patched = jsonpatch.apply_patch(review["request"]["object"], ops)
    assert patched["spec"]["schedulerName"] == "default-scheduler"
    kubernetes_validate.validate(patched, kubernetes_validate.latest_version(), strict=True)
    (warning,) = [w for w in response["warnings"] if "no live leader" in w]
    assert warning.startswith("gpupack: gpupack-scheduler has no live leader " + words)
    assert warning.endswith("left on default-scheduler, not packed") and len(warning) <= 120
    assert unrouted(registry, reason) == 2
    (line,) = [
        r for r in caplog.records if r.name == "gpupack.webhook.unrouted"
    ]  # the second pod falls in the same 10 s
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert line.getMessage().startswith(
        f"1 GPU pod left on default-scheduler, not packed, since the last line ({reason} 1)"
    )
    assert "no live leader (lease gpupack-system/gpupack-scheduler: " in line.getMessage()
    assert line.__dict__["pod"] == "ml-serving/llm-infer-7b-abc12"  # a key=value of the line


async def test_dry_runs_and_audit_mode_warn_but_do_not_count_as_unrouted_pods(
    aiohttp_client: Any, fake_api: tuple[FakeApiServer, Path]
) -> None:
    _fake, kubeconfig = fake_api  # no Lease: missing
    client, registry = await webhook(aiohttp_client, kubeconfig)
    response, _ = await admit(client, recorded_review("005-mutate-dry-run-infer"))
    assert any("(lease not found)" in w for w in response["warnings"])
    assert unrouted(registry, "missing") == 0
    audit, audit_registry = await webhook(aiohttp_client, kubeconfig, "mode: audit\n")
    response, _ = await admit(audit, recorded_review(INFER))
    assert any(w.startswith("gpupack audit, would: gpupack-scheduler has no live leader") for w in response["warnings"])
    assert unrouted(audit_registry, "missing") == 0


@pytest.mark.parametrize(
    ("doc", "expected_op", "warning"),
    [
        ("", None, "kept schedulerName my-scheduler from the pod; the policy sends GPU pods to gpupack-scheduler"),
        ("enforce: [scheduler]\n", ROUTED, "schedulerName gpupack-scheduler replaces the pod's my-scheduler"),
    ],
)
async def test_a_pod_that_names_its_own_scheduler_keeps_it_unless_the_policy_enforces_it(
    aiohttp_client: Any,
    fake_api: tuple[FakeApiServer, Path],
    doc: str,
    expected_op: dict[str, str] | None,
    warning: str,
) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = live_lease()
    client, _ = await webhook(aiohttp_client, kubeconfig, doc)
    review = recorded_review(INFER)
    review["request"]["object"]["spec"]["schedulerName"] = "my-scheduler"
    response, ops = await admit(client, review)
    assert [op for op in ops if op["path"] == "/spec/schedulerName"] == ([expected_op] if expected_op else [])
    assert any(warning in w for w in response["warnings"])


async def test_a_routed_pod_sent_again_gets_an_empty_patch(
    aiohttp_client: Any, fake_api: tuple[FakeApiServer, Path]
) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = live_lease()
    client, _ = await webhook(aiohttp_client, kubeconfig)
    review = recorded_review(INFER)
    _, ops = await admit(client, review)
    review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], ops)
    response, again = await admit(client, review)
    assert again == [] and "patch" not in response


async def test_with_routing_off_no_lease_is_read_and_pods_keep_the_default_scheduler(
    aiohttp_client: Any, fake_api: tuple[FakeApiServer, Path]
) -> None:
    fake, kubeconfig = fake_api
    client, registry = await webhook(aiohttp_client, kubeconfig, "scheduler: {name: null}\n")
    response, ops = await admit(client, recorded_review(INFER))
    assert ops and not any(op["path"] == "/spec/schedulerName" for op in ops)
    assert not any("scheduler" in w for w in response["warnings"])
    assert fake.lease_reads() == 0
    assert (
        registry.get_sample_value("gpupack_scheduler_lease_live", {"lease": "gpupack-system/gpupack-scheduler"}) is None
    )


async def test_a_garbage_lease_never_breaks_admission(
    aiohttp_client: Any, fake_api: tuple[FakeApiServer, Path]
) -> None:
    fake, kubeconfig = fake_api
    garbage = leader_lease(*KEY, time.time())
    garbage["spec"].update(renewTime="yesterday", leaseDurationSeconds=-15)
    fake.leases[KEY] = garbage
    client, registry = await webhook(aiohttp_client, kubeconfig)
    response, ops = await admit(client, recorded_review(INFER))
    assert response["allowed"] and ops and not any(op["path"] == "/spec/schedulerName" for op in ops)
    assert any(
        w.startswith("gpupack: gpupack-scheduler has no live leader (lease invalid: spec.leaseDurationSeconds -15")
        for w in response["warnings"]
    )
    assert unrouted(registry, "invalid") == 1
