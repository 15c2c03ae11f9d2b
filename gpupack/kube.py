"""The only module that talks to the Kubernetes API client: reads PriorityClasses and node GPU resources.

Lists are read raw (`_preload_content=False`) and only the few fields used are kept, instead of building the
client's generated model objects for every node. A background task refreshes the snapshot; request handlers
only read the last one, so an unreachable API never slows admission down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import orjson
from kubernetes import client, config

from gpupack import contract
from gpupack.cluster import UNKNOWN, ClusterFacts, PriorityClassInfo, facts
from gpupack.telemetry import ClusterReadMetrics

log = logging.getLogger(__name__)

PAGE_SIZE = 500
REQUEST_TIMEOUT = 10.0


def priority_classes_from(items: Iterable[dict[str, Any]]) -> dict[str, PriorityClassInfo]:
    """PriorityClass objects (as JSON) to name -> value and preemption policy."""
    out: dict[str, PriorityClassInfo] = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name")
        value = item.get("value")
        if isinstance(name, str) and isinstance(value, int):
            out[name] = PriorityClassInfo(value, item.get("preemptionPolicy") or "PreemptLowerPriority")
    return out


def advertised_from(nodes: Iterable[dict[str, Any]]) -> frozenset[str]:
    """NVIDIA extended resources that at least one node has in its allocatable with a count above zero."""
    found: set[str] = set()
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for key, value in allocatable.items():
            if key.startswith(contract.NVIDIA_RESOURCE_PREFIX) and str(value) not in ("0", ""):
                found.add(key)
    return frozenset(found)


def facts_from_lists(priority_class_list: dict[str, Any] | None, node_list: dict[str, Any] | None) -> ClusterFacts:
    """Facts from `kubectl get priorityclasses,nodes -o json`-style lists; a None list stays unknown."""
    classes = priority_classes_from(priority_class_list.get("items") or []) if priority_class_list else None
    advertised = advertised_from(node_list.get("items") or []) if node_list else None
    return facts(classes, advertised, time.time())


class ClusterReader(Protocol):
    """Reads a fresh snapshot; blocking (run in a thread); raises on any failure."""

    def read(self) -> ClusterFacts: ...


def api_client(kubeconfig: Path | None = None, in_cluster: bool = False) -> client.ApiClient:
    """An API client from a kubeconfig file or the pod's service account."""
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration)
    return client.ApiClient(configuration)


class KubeClusterReader:
    """Lists PriorityClasses and nodes (paginated) through the kubernetes client."""

    def __init__(self, api: client.ApiClient) -> None:
        self._scheduling = client.SchedulingV1Api(api)
        self._core = client.CoreV1Api(api)

    def _pages(self, call: Callable[..., Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "limit": PAGE_SIZE,
                "_preload_content": False,
                "_request_timeout": REQUEST_TIMEOUT,
            }
            if token:
                kwargs["_continue"] = token
            body = orjson.loads(call(**kwargs).data)
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def read(self) -> ClusterFacts:
        """One consistent-enough snapshot (two lists, each paginated)."""
        classes = priority_classes_from(self._pages(self._scheduling.list_priority_class))
        advertised = advertised_from(self._pages(self._core.list_node))
        return facts(classes, advertised, time.time())


class ClusterFactsCache:
    """The last snapshot read, refreshed in the background; UNKNOWN until the first successful read."""

    def __init__(self, reader: ClusterReader | None, metrics: ClusterReadMetrics | None = None) -> None:
        self.reader = reader
        self.facts: ClusterFacts = UNKNOWN
        self._metrics = metrics

    async def refresh(self) -> bool:
        """Read once; on failure keep the last snapshot (the API's last word beats the policy's guess)."""
        if self.reader is None:
            return False
        try:
            self.facts = await asyncio.to_thread(self.reader.read)
        except Exception as exc:
            log.warning("cannot read PriorityClasses and nodes from the API, keeping the last snapshot: %s", exc)
            if self._metrics is not None:
                self._metrics.failures.inc()
            return False
        if self._metrics is not None:
            self._metrics.last_success.set(self.facts.read_at or time.time())
        return True

    async def run(self, interval: Callable[[], float]) -> None:
        """Refresh every `interval()` seconds until cancelled."""
        if self.reader is None:
            return
        while True:
            await self.refresh()
            await asyncio.sleep(interval())
