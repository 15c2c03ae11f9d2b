"""Reading PriorityClasses and node GPU resources through the real kubernetes client from an HTTP-level fake API
server, for what a real one cannot be made to do on demand (answer 503); the reads themselves (pagination, values,
changes, the shipped RBAC) run against a real kube-apiserver in test_watch_real.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.kube import ClusterFactsCache, KubeClusterReader, api_client
from gpupack.core.telemetry import ClusterReadMetrics
from gpupack.testing.apiserver import FakeApiServer, write_kubeconfig
from tests.conftest import recorded_api_server


@pytest.fixture
async def fake_api(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = recorded_api_server()
    server = await aiohttp_server(fake.app())
    yield fake, write_kubeconfig(tmp_path / "kubeconfig", server.port)


# Stays on the fake: a real API server cannot be made to answer a list with 503 on demand.
async def test_failed_read_keeps_the_last_snapshot_and_counts_it(fake_api: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = fake_api
    registry = CollectorRegistry()
    cache = ClusterFactsCache(KubeClusterReader(api_client(kubeconfig)), ClusterReadMetrics(registry))
    assert await cache.refresh()
    before = cache.facts
    fake.failing = True
    assert not await cache.refresh()
    assert cache.facts is before
    assert registry.get_sample_value("gpupack_cluster_read_failures_total") == 1.0


# No API server at all: the webhook runs without API access.
async def test_without_api_access_facts_stay_unknown() -> None:
    cache = ClusterFactsCache(None)
    assert not await cache.refresh()
    assert cache.facts.priority_classes is None and cache.facts.advertised_resources is None
