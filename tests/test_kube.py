"""Reading PriorityClasses and node GPU resources through the real kubernetes client, from a fake API server
that speaks HTTP (with pagination) and serves the recorded cluster state."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.cluster import PriorityClassInfo
from gpupack.kube import ClusterFactsCache, KubeClusterReader, api_client
from gpupack.telemetry import ClusterReadMetrics
from tests.conftest import RECORDED


class FakeApiServer:
    """Serves `/apis/scheduling.k8s.io/v1/priorityclasses` and `/api/v1/nodes`, one item per page."""

    def __init__(self) -> None:
        self.priority_classes = json.loads((RECORDED / "priorityclasses.json").read_text())["items"]
        self.nodes = json.loads((RECORDED / "nodes.json").read_text())["items"]
        self.failing = False
        self.requests: list[str] = []

    def _page(self, request: web.Request, items: list[dict[str, Any]], kind: str) -> web.Response:
        self.requests.append(request.path_qs)
        if self.failing:
            return web.json_response({"kind": "Status", "code": 503, "message": "unavailable"}, status=503)
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(items))
        limit = min(limit, 1)  # force pagination
        nxt = start + limit
        meta = {"resourceVersion": "100", **({"continue": str(nxt)} if nxt < len(items) else {})}
        return web.json_response({"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items[start:nxt]})

    async def list_priority_classes(self, request: web.Request) -> web.Response:
        return self._page(request, self.priority_classes, "PriorityClassList")

    async def list_nodes(self, request: web.Request) -> web.Response:
        return self._page(request, self.nodes, "NodeList")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/apis/scheduling.k8s.io/v1/priorityclasses", self.list_priority_classes)
        app.router.add_get("/api/v1/nodes", self.list_nodes)
        return app


@pytest.fixture
async def fake_api(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = FakeApiServer()
    server = await aiohttp_server(fake.app())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    yield fake, kubeconfig


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
