"""Reading the gpupack scheduler's leader Lease through the real kubernetes client where a real API server cannot
serve what is read: Lease bodies it would refuse to store (an HTTP-level fake serves them), an API server that is
down, no API access at all. The verdicts after 200 / 404 / 403, what a failed read keeps, the log lines and the
gauge run against a real kube-apiserver with the shipped RBAC in test_watch_real.py."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.kube import KubeLeaseReader, api_client
from gpupack.core.lease_cache import LeaseCache
from gpupack.core.policy import parse_policy
from gpupack.core.telemetry import LeaseMetrics
from gpupack.demo.cluster import leader_lease
from gpupack.testing.apiserver import FakeApiServer, write_kubeconfig
from tests.conftest import recorded_api_server

NOW = 1_800_000_000.0
KEY = ("gpupack-system", "gpupack-scheduler")
DEFAULTS = parse_policy(b"").scheduler
LIVE_GAUGE = ("gpupack_scheduler_lease_live", {"lease": "gpupack-system/gpupack-scheduler"})


@pytest.fixture
async def fake_api(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = recorded_api_server()
    server = await aiohttp_server(fake.app())
    yield fake, write_kubeconfig(tmp_path / "kubeconfig", server.port)


def cache_for(kubeconfig: Path, registry: CollectorRegistry | None = None) -> LeaseCache:
    metrics = LeaseMetrics(registry) if registry is not None else None
    return LeaseCache(KubeLeaseReader(api_client(kubeconfig)), metrics, clock=lambda: NOW)


def renewed(seconds_ago: float, **kw: Any) -> dict[str, Any]:
    return leader_lease(*KEY, NOW - seconds_ago, **kw)


# Stays on the fake: the real API server refuses to store these Leases (a renewTime that is not a MicroTime is a
# 400, a duration below 1 a 422) and always answers JSON objects, so only a fake can serve them to the reader.
@pytest.mark.parametrize(
    ("served", "live", "reason"),
    [
        (
            {**renewed(1), "spec": {"holderIdentity": "x", "renewTime": "yesterday", "leaseDurationSeconds": 15}},
            False,
            "invalid",
        ),
        (
            {
                **renewed(1),
                "spec": {"holderIdentity": "x", "renewTime": "2026-01-01T00:00:00Z", "leaseDurationSeconds": -5},
            },
            False,
            "invalid",
        ),
        (b"<html>not json</html>", False, "unreadable"),
        (b"[1, 2]", False, "invalid"),
    ],
)
async def test_a_lease_no_api_server_would_store_gives_a_verdict(
    fake_api: tuple[FakeApiServer, Path], served: Any, live: bool, reason: str | None
) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = served
    cache = cache_for(kubeconfig)
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (live, reason)
    assert cache.status(DEFAULTS, NOW) == status
    assert fake.requests == ["/apis/coordination.k8s.io/v1/namespaces/gpupack-system/leases/gpupack-scheduler"]


# Stays off the real API server: this is an API server that is down (nothing listens on the port).
async def test_an_api_server_that_is_down_makes_the_lease_unreadable(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cache = cache_for(write_kubeconfig(tmp_path / "kubeconfig", port))
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (False, "unreadable")
    assert "refused" in status.detail.lower() and len(status.detail) < 80


# No API server at all: the webhook runs without API access.
async def test_without_api_access_nothing_is_read_and_the_scheduler_is_not_live() -> None:
    cache = LeaseCache(None)
    assert await cache.refresh(DEFAULTS) is None
    status = cache.status(DEFAULTS, NOW)
    assert (status.live, status.reason, status.detail) == (False, "unreadable", "no API access to read the lease")
