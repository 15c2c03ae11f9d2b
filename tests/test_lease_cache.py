"""Reading the gpupack scheduler's leader Lease through the real kubernetes client from an HTTP-level fake API
server: one GET by name, the verdict after 200 / 404 / 403 / garbage, what a failed read keeps, the log lines and
the gauge."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.kube import KubeLeaseReader, api_client
from gpupack.core.lease_cache import LeaseCache
from gpupack.core.policy import SchedulerPolicy, parse_policy
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


@pytest.mark.parametrize(
    ("served", "live", "reason"),
    [
        (renewed(1), True, None),
        (renewed(60), False, "expired"),
        (None, False, "missing"),
        (renewed(1, holder=""), False, "no-holder"),
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
async def test_one_read_gives_the_verdict(
    fake_api: tuple[FakeApiServer, Path], served: Any, live: bool, reason: str | None
) -> None:
    fake, kubeconfig = fake_api
    if served is not None:
        fake.leases[KEY] = served
    cache = cache_for(kubeconfig)
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (live, reason)
    assert cache.status(DEFAULTS, NOW) == status
    assert fake.requests == ["/apis/coordination.k8s.io/v1/namespaces/gpupack-system/leases/gpupack-scheduler"]


async def test_a_forbidden_read_is_unreadable_and_logged_once_without_a_traceback(
    fake_api: tuple[FakeApiServer, Path], caplog: pytest.LogCaptureFixture
) -> None:
    fake, kubeconfig = fake_api
    fake.lease_forbidden = True
    registry = CollectorRegistry()
    cache = cache_for(kubeconfig, registry)
    with caplog.at_level(logging.INFO, "gpupack.core.lease_cache"):
        status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason, status.detail) == (
        False,
        "unreadable",
        "lease unreadable: HTTP 403",
    )
    lines = [r for r in caplog.records if r.name == "gpupack.core.lease_cache"]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]  # the failed read, the verdict
    assert lines[0].getMessage() == "cannot read lease gpupack-system/gpupack-scheduler: HTTP 403"
    assert "no live leader (lease gpupack-system/gpupack-scheduler: unreadable: HTTP 403)" in lines[1].getMessage()
    assert all(r.exc_info is None for r in lines)
    assert registry.get_sample_value("gpupack_scheduler_lease_read_failures_total") == 1.0
    assert registry.get_sample_value(*LIVE_GAUGE) == 0.0


async def test_a_failed_read_after_a_good_one_keeps_the_hold_until_it_expires(
    fake_api: tuple[FakeApiServer, Path], caplog: pytest.LogCaptureFixture
) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = renewed(1)
    cache = cache_for(kubeconfig)
    await cache.refresh(DEFAULTS)
    fake.lease_forbidden = True
    caplog.clear()
    with caplog.at_level(logging.WARNING, "gpupack.core.lease_cache"):
        status = await cache.refresh(DEFAULTS)
    assert status is not None and status.live  # one failed read changes nothing
    assert [r.getMessage() for r in caplog.records if r.name == "gpupack.core.lease_cache"] == [
        "cannot read lease gpupack-system/gpupack-scheduler: HTTP 403; keeping the last renewal seen until it expires"
    ]
    # renewed 1 s before NOW, held 15 s, 10 s of grace: live up to NOW + 24, then unreadable (not "expired")
    assert cache.status(DEFAULTS, NOW + 24).live
    late = cache.status(DEFAULTS, NOW + 24.5)
    assert (late.live, late.reason) == (False, "unreadable")


async def test_a_lease_deleted_after_a_good_read_is_missing_at_once(fake_api: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = renewed(1)
    cache = cache_for(kubeconfig)
    await cache.refresh(DEFAULTS)
    del fake.leases[KEY]
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (False, "missing")


async def test_an_api_server_that_is_down_makes_the_lease_unreadable(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cache = cache_for(write_kubeconfig(tmp_path / "kubeconfig", port))
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (False, "unreadable")
    assert "refused" in status.detail.lower() and len(status.detail) < 80


async def test_each_change_of_verdict_is_logged_once_and_the_gauge_follows(
    fake_api: tuple[FakeApiServer, Path], caplog: pytest.LogCaptureFixture
) -> None:
    fake, kubeconfig = fake_api
    registry = CollectorRegistry()
    cache = cache_for(kubeconfig, registry)
    said: list[tuple[int, str]] = []
    for served, gauge in [
        (renewed(1), 1.0),
        (renewed(2), 1.0),
        (renewed(90), 0.0),
        (renewed(95), 0.0),
        (renewed(0), 1.0),
    ]:
        fake.leases[KEY] = served
        caplog.clear()
        with caplog.at_level(logging.INFO, "gpupack.core.lease_cache"):
            await cache.refresh(DEFAULTS)
        said += [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "gpupack.core.lease_cache"]
        assert registry.get_sample_value(*LIVE_GAUGE) == gauge
    assert said == [
        (
            logging.INFO,
            "gpupack-scheduler is live: lease gpupack-system/gpupack-scheduler held by "
            "gpupack-scheduler-6f7c9d-x2k9q_3b1f; GPU pods are sent to it",
        ),
        (
            logging.WARNING,
            "gpupack-scheduler has no live leader (lease gpupack-system/gpupack-scheduler: expired 75s ago): "
            "GPU pods stay on default-scheduler, not packed",
        ),
        (
            logging.INFO,
            "gpupack-scheduler is live: lease gpupack-system/gpupack-scheduler held by "
            "gpupack-scheduler-6f7c9d-x2k9q_3b1f; GPU pods are sent to it",
        ),
    ]


async def test_with_routing_off_nothing_is_read_and_no_gauge_is_exported(fake_api: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = renewed(1)
    registry = CollectorRegistry()
    cache = cache_for(kubeconfig, registry)
    await cache.refresh(DEFAULTS)
    assert registry.get_sample_value(*LIVE_GAUGE) == 1.0
    off = parse_policy(b"scheduler: {name: null}").scheduler
    assert await cache.refresh(off) is None
    assert fake.lease_reads() == 1 and registry.get_sample_value(*LIVE_GAUGE) is None


async def test_a_policy_naming_another_lease_is_not_judged_by_the_old_one(fake_api: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = fake_api
    fake.leases[KEY] = renewed(1)
    fake.leases[("kube-system", "gpu-scheduler")] = renewed(1)
    cache = cache_for(kubeconfig)
    await cache.refresh(DEFAULTS)
    other = SchedulerPolicy.model_validate(
        {"name": "gpu-scheduler", "lease": {"namespace": "kube-system", "name": "gpu-scheduler"}}
    )
    assert cache.status(other, NOW).reason == "not-read-yet"
    await cache.refresh(other)
    assert cache.status(other, NOW).live
    assert fake.requests[-1] == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpu-scheduler"


async def test_without_api_access_nothing_is_read_and_the_scheduler_is_not_live() -> None:
    cache = LeaseCache(None)
    assert await cache.refresh(DEFAULTS) is None
    status = cache.status(DEFAULTS, NOW)
    assert (status.live, status.reason, status.detail) == (False, "unreadable", "no API access to read the lease")
