"""Reading PriorityClasses and node GPU resources through the real kubernetes client from an HTTP-level fake API
server, for what a real one cannot be made to do on demand (answer 503); the reads themselves (pagination, values,
changes, the shipped RBAC) run against a real kube-apiserver in test_watch_real.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.cluster import ClusterFacts, facts
from gpupack.core.kube import ClusterFactsCache, KubeClusterReader, api_client, offered_by_node_overlays
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
    api = api_client(kubeconfig)
    cache = ClusterFactsCache(KubeClusterReader(api), ClusterReadMetrics(registry))
    assert await cache.refresh()
    before = cache.facts
    fake.failing = True
    assert not await cache.refresh()
    assert cache.facts is before
    assert registry.get_sample_value("gpupack_cluster_read_failures_total") == 1.0
    api.close()


# No API server at all: the webhook runs without API access.
async def test_without_api_access_facts_stay_unknown() -> None:
    cache = ClusterFactsCache(None)
    assert not await cache.refresh()
    assert cache.facts.priority_classes is None and cache.facts.advertised_resources is None


class Snapshots:
    """A `ClusterReader` that hands out snapshots in turn: the memory of advertised resources, not the reading,
    is the subject (the reading runs against a real kube-apiserver in test_watch_real.py)."""

    def __init__(self, *advertised: frozenset[str], every: float = 3600.0) -> None:
        self.queue = [facts({}, a, 1_800_000_000.0 + i * every) for i, a in enumerate(advertised)]

    def read(self) -> ClusterFacts:
        return self.queue.pop(0)


MIG = frozenset({"nvidia.com/mig-1g.5gb"})


async def test_a_cluster_whose_nodes_never_advertised_a_gpu_resource_leaves_it_unknown() -> None:
    # a new cluster whose GPU pools are at zero: the policy's MIG profiles stand, not "no profile offered"
    cache = ClusterFactsCache(Snapshots(frozenset()))
    assert await cache.refresh()
    assert cache.facts.advertised_resources is None


@pytest.mark.parametrize(("keep_hours", "after_two_hours"), [(24, MIG), (1, None)])
async def test_resources_no_node_advertises_any_more_are_remembered_for_a_while(
    keep_hours: float, after_two_hours: frozenset[str] | None
) -> None:
    cache = ClusterFactsCache(Snapshots(MIG, frozenset(), frozenset()), remember_seconds=lambda: keep_hours * 3600)
    assert await cache.refresh() and cache.facts.advertised_resources == MIG
    assert await cache.refresh()  # an hour later, the pool at zero
    assert cache.facts.advertised_resources == MIG
    assert await cache.refresh()  # two hours later
    assert cache.facts.advertised_resources == after_two_hours


@pytest.mark.parametrize(
    ("overlays", "offered"),
    [
        (
            [{"spec": {"capacity": {"nvidia.com/mig-1g.5gb": "16", "example.com/other": "1"}}}],
            {"nvidia.com/mig-1g.5gb"},
        ),
        ([{"spec": {"capacity": {"nvidia.com/gpu.shared": 0}}}], set()),
        ([{"spec": {"price": "1.0"}}], set()),  # a price overlay offers no resource
        ([{"metadata": {"name": "bad"}, "spec": {"capacity": ["nvidia.com/mig-1g.5gb"]}}], set()),
        (["not an object", None, {"spec": None}], set()),
    ],
)
def test_node_overlays_offer_the_nvidia_resources_they_add_and_malformed_ones_nothing(
    overlays: list[Any], offered: set[str]
) -> None:
    assert offered_by_node_overlays(overlays) == offered
