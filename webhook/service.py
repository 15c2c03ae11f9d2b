"""Assemble and run the webhook server: policy store, cluster snapshot, scheduler Lease, metrics, background
refreshers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.kube import ClusterFactsCache, ClusterReader, KubeClusterReader, KubeLeaseReader, api_client
from gpupack.core.lease_cache import LeaseCache, LeaseReader
from gpupack.core.server import ServeOptions, serve_forever
from gpupack.core.telemetry import ClusterReadMetrics, LeaseMetrics, monitored_policy_store
from gpupack.webhook.app import WebhookSettings, make_app

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """Everything `gpupack webhook` is told on its command line."""

    policy_file: Path | None
    serve: ServeOptions
    settings: WebhookSettings = field(default_factory=WebhookSettings)
    policy_poll_seconds: float = 5.0
    kubeconfig: Path | None = None
    in_cluster: bool = False


def build_app(
    config: WebhookConfig,
    registry: CollectorRegistry | None = None,
    reader: ClusterReader | None = None,
    lease_reader: LeaseReader | None = None,
) -> web.Application:
    """The webhook app with its refreshers attached to its lifetime (`cleanup_ctx`).

    `reader` replaces the API as the source of PriorityClasses and node resources, `lease_reader` as the source
    of the gpupack scheduler's Lease (the embedded demo). Raises PolicyError or OSError when the policy file is
    invalid or unreadable: refusing to start beats starting with a policy nobody wrote.
    """
    registry = registry or CollectorRegistry()
    store = monitored_policy_store(config.policy_file, registry)
    if (reader is None or lease_reader is None) and (config.kubeconfig is not None or config.in_cluster):
        api = api_client(config.kubeconfig, config.in_cluster)
        reader = reader or KubeClusterReader(api)
        lease_reader = lease_reader or KubeLeaseReader(api)
    cluster = ClusterFactsCache(
        reader, ClusterReadMetrics(registry), remember_seconds=lambda: store.policy.cluster.remember_seconds
    )
    lease = LeaseCache(lease_reader, LeaseMetrics(registry))
    app = make_app(store, cluster, registry, config.settings, lease=lease)

    async def refreshers(_app: web.Application) -> AsyncIterator[None]:
        await cluster.refresh()  # first read before serving, so the first pods already see the API's values
        await lease.refresh(store.policy.scheduler)  # and are not sent away from a live scheduler
        tasks = [
            asyncio.create_task(store.watch(config.policy_poll_seconds)),
            asyncio.create_task(cluster.run(lambda: store.policy.cluster.refresh_seconds)),
            asyncio.create_task(lease.run(lambda: store.policy.scheduler)),
        ]
        yield
        for task in tasks:
            task.cancel()

    app.cleanup_ctx.append(refreshers)
    return app


async def run(config: WebhookConfig) -> None:
    """Serve until SIGTERM."""
    await serve_forever(build_app(config), config.serve)
