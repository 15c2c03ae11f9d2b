"""Reading PriorityClasses and node GPU resources through the real kubernetes client, from a fake API server
that speaks HTTP (with pagination) and serves the recorded cluster state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.cluster import PriorityClassInfo
from gpupack.core.kube import ClusterFactsCache, KubeClusterReader, api_client
from gpupack.core.telemetry import ClusterReadMetrics
from gpupack.testing.apiserver import FakeApiServer, write_kubeconfig
from tests.conftest import recorded_api_server


@pytest.fixture
async def fake_api(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = recorded_api_server()
    server = await aiohttp_server(fake.app())
    yield fake, write_kubeconfig(tmp_path / "kubeconfig", server.port)


async def test_reader_lists_every_page_and_keeps_only_what_it_needs(fake_api: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = fake_api
    cache = ClusterFactsCache(KubeClusterReader(api_client(kubeconfig)))
    assert await cache.refresh()
    classes = cache.facts.priority_classes
    assert classes is not None
    assert classes["gpu-batch-low"] == PriorityClassInfo(-10, "Never")
    assert classes["gpu-inference-high"] == PriorityClassInfo(100000, "PreemptLowerPriority")
    assert cache.facts.advertised_resources == frozenset(
        {
            "nvidia.com/mig-1g.5gb",
            "nvidia.com/mig-2g.10gb",
            "nvidia.com/mig-3g.20gb",
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
        }
    )
    assert sum("continue=" in r for r in fake.requests) == len(fake.priority_classes) - 1 + len(fake.nodes) - 1


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


async def test_without_api_access_facts_stay_unknown() -> None:
    cache = ClusterFactsCache(None)
    assert not await cache.refresh()
    assert cache.facts.priority_classes is None and cache.facts.advertised_resources is None
