"""Assemble and run the extender: policy store, watch cache, live metrics, and their background tasks.

The cluster comes from the API (list + watch, `--kubeconfig` or in-cluster) or, offline, from node and pod
list files (`kubectl get nodes,pods -o json`). Live metrics come from Prometheus or a DCGM text snapshot;
without either, every node scores neutral on load.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.kube import RawListWatch, api_client
from gpupack.core.policy import Policy
from gpupack.core.server import ServeOptions, is_loopback, serve_forever
from gpupack.core.telemetry import monitored_policy_store
from gpupack.extender.app import Extender, ExtenderSettings, make_app
from gpupack.extender.changes import apply_events, bound_at
from gpupack.extender.demand import RequestsCache
from gpupack.extender.informer import Informer
from gpupack.extender.sources import LiveMetricsCache, MetricsSource, PrometheusSource, StaticSource
from gpupack.extender.state import ClusterState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """Everything `gpupack extender` is told on its command line."""

    policy_file: Path | None
    serve: ServeOptions
    settings: ExtenderSettings = field(default_factory=ExtenderSettings)
    policy_poll_seconds: float = 5.0
    kubeconfig: Path | None = None
    in_cluster: bool = False
    nodes_file: Path | None = None
    pods_file: Path | None = None
    prometheus_url: str | None = None
    metrics_file: Path | None = None


def _items(path: Path) -> list[dict[str, Any]]:
    data = orjson.loads(path.read_bytes())
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON list object with items (kubectl get ... -o json)")
    return [i for i in items if isinstance(i, dict)]


def load_lists(state: ClusterState, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], policy: Policy) -> None:
    """Fill `state` from node and pod objects (offline use and the demo), as the informer's first list does;
    unreadable objects are skipped with a log line."""
    state.replace_nodes([])
    state.replace_pods([])
    apply_events(state, "nodes", ({"type": "ADDED", "object": n} for n in nodes), policy)
    in_bind_order = sorted(pods, key=bound_at)  # as the informer replays a list (see `extender.changes.bound_at`)
    apply_events(state, "pods", ({"type": "ADDED", "object": p} for p in in_bind_order), policy, RequestsCache())
    state.synced = True


async def _freeze_when_synced(informer: Informer) -> None:
    """After the first list, keep the cache's objects out of the garbage collector's full passes: with 150,000
    pods a full pass pauses the event loop for about 100 ms, which the verbs' latency would pay."""
    await informer.wait_synced()
    gc.freeze()
    log.info("nodes and pods listed; serving from the watch cache")


async def _read_live_once_listed(informer: Informer, live: LiveMetricsCache, state: ClusterState) -> None:
    """Read the live metrics again right after the first list when a DRA driver publishes GPUs: the read before
    serving had no GPU UUIDs to map DCGM series by (`ClusterState.gpu_nodes`), and would leave the DRA nodes'
    series under the exporter pod's name until the next poll (15 s by default)."""
    await informer.wait_synced()
    if state.gpu_nodes:
        await live.refresh()


def metrics_source(config: ExtenderConfig) -> MetricsSource | None:
    """Prometheus, the snapshot file, or nothing."""
    if config.prometheus_url:
        return PrometheusSource(config.prometheus_url)
    if config.metrics_file:
        return StaticSource(config.metrics_file)
    return None


def build_app(config: ExtenderConfig, registry: CollectorRegistry | None = None) -> web.Application:
    """The extender app with its background tasks attached to its lifetime (`cleanup_ctx`): the policy file
    watch, the live metrics poll, and the list + watch of nodes and pods when the API is configured.

    Raises PolicyError, OSError or ValueError when the policy, the kubeconfig or the list files cannot be used.
    """
    registry = registry or CollectorRegistry()
    store = monitored_policy_store(config.policy_file, registry)
    state = ClusterState()
    if config.nodes_file is not None:
        pods = _items(config.pods_file) if config.pods_file else []
        load_lists(state, _items(config.nodes_file), pods, store.policy)
    informer: Informer | None = None
    if config.nodes_file is None and (config.kubeconfig is not None or config.in_cluster):
        informer = Informer(RawListWatch(api_client(config.kubeconfig, config.in_cluster)), state, lambda: store.policy)
    extender = Extender(store, state, config.settings, watch=informer.counters if informer else None)
    app = make_app(extender, registry)

    def on_read(ok: bool) -> None:
        if ok:
            extender.live = live.snapshot
        elif extender.metrics is not None:
            extender.metrics.metrics_read_failures.inc()

    live = LiveMetricsCache(
        metrics_source(config), lambda: store.policy.extender.metrics, on_read, lambda: extender.state.gpu_nodes
    )

    async def background(_app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(store.watch(config.policy_poll_seconds))]
        if live.source is not None:
            await live.refresh()  # first read before serving
            tasks.append(asyncio.create_task(live.run()))
        if informer is not None:
            tasks.append(asyncio.create_task(informer.run()))
            tasks.append(asyncio.create_task(_freeze_when_synced(informer)))
            if live.source is not None:
                tasks.append(asyncio.create_task(_read_live_once_listed(informer, live, extender.state)))
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    app.cleanup_ctx.append(background)
    return app


def check_exposure(serve: ServeOptions) -> None:
    """Raise ValueError when the verbs would be reachable off loopback without client certificates.

    A caller of `/filter` or `/prioritize` can make the extender count capacity as taken (an assumption, for
    `assumeSeconds`), so only kube-scheduler may call: from the same pod on loopback, or with a certificate
    from the CA the extender trusts.
    """
    if not is_loopback(serve.host) and not (serve.tls and serve.client_ca_file is not None):
        where = serve.host or "every interface"
        raise ValueError(
            f"--host {where} is not loopback: a caller of /filter or /prioritize can reserve capacity, so the verbs "
            "are served there only over TLS with client certificates (--cert-file, --key-file, --client-ca-file); "
            "or keep the default 127.0.0.1 and let kube-scheduler call from the same pod"
        )


async def run(config: ExtenderConfig) -> None:
    """Serve until SIGTERM; raises ValueError for a listener that would expose the verbs (`check_exposure`)."""
    check_exposure(config.serve)
    await serve_forever(build_app(config), config.serve)
