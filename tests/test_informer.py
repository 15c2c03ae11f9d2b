"""The watch cache against a local HTTP fake of the API server that speaks list (paginated) and watch (chunked JSON
lines), through the real kubernetes client, for the faults a real API server cannot be made to produce on demand: a
malformed object in a list or a watch, an HTTP 410 answer to a watch request. Lists, events, bookmarks, a dropped
connection, 410 Gone after a restart or an etcd compaction and the extender service run against a real
kube-apiserver in test_watch_real.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes import client

from gpupack.core.kube import RawListWatch
from gpupack.extender.changes import apply_events, bound_at
from gpupack.extender.informer import KINDS, Backoff, Informer
from gpupack.extender.state import ClusterState
from gpupack.testing.dra import allocated_claim as claim
from gpupack.testing.dra import gpu_slice
from tests.extender_kit import gpu_pod, node, policy

GPU = "nvidia.com/gpu"
DROP = b"drop"


def bound(name: str, node_name: str, gpus: int = 1, phase: str = "Running") -> dict[str, Any]:
    """A pod bound to `node_name` asking for `gpus` whole GPUs, 1 CPU and 4Gi."""
    pod = gpu_pod(GPU, gpus, name=name)
    pod["spec"]["nodeName"] = node_name
    pod["status"] = {"phase": phase}
    return pod


class FakeApiServer:
    """`/api/v1/nodes` and `/api/v1/pods`: lists two items per page; watches replay the history after the
    version asked for, then stream what the test does, until `timeoutSeconds`."""

    def __init__(self) -> None:
        self.version = 100
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        self.history: dict[str, list[tuple[int, bytes]]] = {k: [] for k in KINDS}
        self.oldest = dict.fromkeys(KINDS, 0)
        """Watches from a version below this get 410 Gone (the history was compacted)."""
        self.streams: dict[str, list[asyncio.Queue[bytes]]] = {k: [] for k in KINDS}
        self.dra = False
        """Serve `resource.k8s.io/v1` ResourceSlices and ResourceClaims too (else they are 404, not served)."""
        self.lists: list[str] = []
        self.watches: list[tuple[str, str]] = []
        """(kind, resourceVersion) of every watch request, in order."""
        self.gone_on_next_watch: set[str] = set()
        """Kinds whose next watch request gets HTTP 410."""

    # what the tests do -------------------------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = orjson.loads(orjson.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def _send(self, kind: str, line: bytes, keep: bool = True) -> None:
        if keep:
            self.history[kind].append((self.version, line))
        for queue in self.streams[kind]:
            queue.put_nowait(line)

    def seed(self, kind: str, *objs: dict[str, Any]) -> None:
        """Objects that exist before anyone lists (no events)."""
        for obj in objs:
            obj = self._bump(obj)
            self.objects[kind][self._key(obj)] = obj

    def event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """ADDED, MODIFIED or DELETED: stored and streamed to live watches."""
        obj = self._bump(obj)
        if event_type == "DELETED":
            self.objects[kind].pop(self._key(obj), None)
        else:
            self.objects[kind][self._key(obj)] = obj
        self._send(kind, orjson.dumps({"type": event_type, "object": obj}) + b"\n")

    def raw_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """An event streamed but not stored (a malformed object the server lets through)."""
        self.version += 1
        obj = {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": str(self.version)}}
        self._send(kind, orjson.dumps({"type": event_type, "object": obj}) + b"\n")

    def compact(self, kind: str) -> None:
        """Forget the history: watches from any version before the current one get 410."""
        self.history[kind].clear()
        self.oldest[kind] = self.version

    def drop(self, kind: str) -> None:
        """Close the connections of live watches mid-stream."""
        self._send(kind, DROP, keep=False)

    # HTTP --------------------------------------------------------------------------------------------------
    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        if request.query.get("watch") in ("1", "true", "True"):
            return await self._watch(request, kind)
        start = int(request.query.get("continue") or 0)
        if not start:
            self.lists.append(kind)
        items = [self.objects[kind][k] for k in sorted(self.objects[kind])]
        end = start + min(int(request.query.get("limit") or 500), 2)
        meta = {"resourceVersion": str(self.version), **({"continue": str(end)} if end < len(items) else {})}
        return web.json_response({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items[start:end]})

    async def _watch(self, request: web.Request, kind: str) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "")
        self.watches.append((kind, since))
        if kind in self.gone_on_next_watch or int(since or 0) < self.oldest[kind]:
            self.gone_on_next_watch.discard(kind)
            body = {"kind": "Status", "code": 410, "reason": "Expired", "message": f"too old resource version: {since}"}
            return web.json_response(body, status=410)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        for version, line in self.history[kind]:
            if version > int(since or 0):
                queue.put_nowait(line)
        self.streams[kind].append(queue)
        deadline = time.monotonic() + float(request.query.get("timeoutSeconds") or 30)
        try:
            while True:
                try:
                    line = await asyncio.wait_for(queue.get(), max(deadline - time.monotonic(), 0))
                except TimeoutError:
                    break
                if line == DROP:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                await response.write(line)
        finally:
            self.streams[kind].remove(queue)
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/{kind:nodes|pods}", self.handle)
        if self.dra:
            app.router.add_get("/apis/resource.k8s.io/v1/{kind:resourceslices|resourceclaims}", self.handle)
        return app


@dataclass
class Running:
    """An informer running against the fake server, its state and its task."""

    fake: FakeApiServer
    informer: Informer
    state: ClusterState
    task: asyncio.Task[None]

    async def until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `check()` holds (the informer works in threads, so poll)."""
        deadline = time.monotonic() + timeout
        while not check():
            assert not self.task.done(), self.task
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached in {timeout}s; counters {self.informer.counters}")
            await asyncio.sleep(0.01)

    def gpus_used(self, node_name: str) -> int:
        return self.state.used(node_name).get(GPU, 0)


@pytest.fixture
async def fake() -> FakeApiServer:
    server = FakeApiServer()
    server.seed("nodes", node("n1", {GPU: 8}), node("n2", {GPU: 8}), node("n3", {GPU: 8}))
    server.seed("pods", bound("a", "n1"), bound("b", "n1", 2), bound("c", "n2"), gpu_pod(GPU, name="pending"))
    return server


@pytest.fixture
async def running(aiohttp_server: Any, fake: FakeApiServer) -> AsyncIterator[Running]:
    server = await aiohttp_server(fake.app())
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    api = client.ApiClient(configuration)
    state = ClusterState()
    the_policy = policy()
    informer = Informer(
        RawListWatch(api), state, lambda: the_policy, backoff=Backoff(initial=0.01, cap=0.05), watch_timeout=30
    )
    task = asyncio.create_task(informer.run())
    try:
        yield Running(fake, informer, state, task)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        api.close()


@asynccontextmanager
async def informing(aiohttp_server: Any, fake: FakeApiServer) -> AsyncIterator[tuple[ClusterState, Informer]]:
    """A fresh informer listing and watching `fake` (seeded first), cancelled on the way out."""
    server = await aiohttp_server(fake.app())
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    with client.ApiClient(configuration) as api:
        state = ClusterState()
        the_policy = policy()
        informer = Informer(RawListWatch(api), state, lambda: the_policy, backoff=Backoff(initial=0.01))
        task = asyncio.create_task(informer.run())
        try:
            yield state, informer
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)


# Stays on the fake: the real API server validates pods, so no list of it carries a malformed one.
async def test_a_malformed_pod_in_the_first_list_is_skipped_and_counted(
    aiohttp_server: Any, fake: FakeApiServer
) -> None:
    broken = bound("broken", "n3")
    broken["spec"]["containers"][0]["resources"]["requests"][GPU] = "two"
    fake.seed("pods", broken)
    async with informing(aiohttp_server, fake) as (state, informer):
        await asyncio.wait_for(informer.wait_synced(), 10)
        assert state.synced
        assert sorted(state.nodes) == ["n1", "n2", "n3"]
        assert state.used("n1")[GPU] == 3 and state.used("n2")[GPU] == 1 and state.used("n3") == {}
        assert len(state.pods) == 3  # the pending pod is not counted, the broken one is skipped
        assert informer.counters.skipped == 1 and informer.counters.lists == 2


async def test_without_the_dra_api_the_informer_syncs_on_nodes_and_pods_and_says_so_once(
    aiohttp_server: Any, fake: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        async with informing(aiohttp_server, fake) as (state, informer):
            await asyncio.wait_for(informer.wait_synced(), 10)
            assert state.used("n1")[GPU] == 3
    refused = [r.getMessage() for r in caplog.records if "cannot list resource" in r.getMessage()]
    assert sorted(m.split(" (")[0] for m in refused) == ["cannot list resourceclaims", "cannot list resourceslices"]
    assert all("404" in m and "device-plugin GPUs only" in m for m in refused)


# Stays on the fake: the real API server validates ResourceSlices, so no list of it carries a malformed one.
async def test_a_malformed_resource_slice_and_a_claim_on_an_unpublished_device_are_skipped_with_a_reason(
    aiohttp_server: Any, fake: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.dra = True
    fake.seed("nodes", node("dra-1", {}), node("dra-2", {}))
    broken = gpu_slice("dra-2", "H100-80GB", 8)
    broken["spec"]["devices"][3]["capacity"]["memory"]["value"] = "eighty gigs"
    fake.seed("resourceslices", gpu_slice("dra-1", "H100-80GB", 8), broken)
    fake.seed("resourceclaims", claim("mine", [("dra-1", "gpu-0")]), claim("ghost", [("dra-2", "gpu-3")]))
    with caplog.at_level(logging.WARNING):
        async with informing(aiohttp_server, fake) as (state, informer):
            await asyncio.wait_for(informer.wait_synced(), 10)
            assert state.nodes["dra-1"].allocatable[GPU] == 8 and state.used("dra-1")[GPU] == 1
            assert GPU not in state.nodes["dra-2"].allocatable
            assert informer.counters.skipped == 1 and informer.counters.lists == 4
            # a broken slice streamed later is skipped too, and the node keeps what it had
            bad_event = gpu_slice("dra-1", "H100-80GB", 8)
            bad_event["spec"]["devices"] = "eight"
            fake.raw_event("resourceslices", "MODIFIED", bad_event)
            deadline = time.monotonic() + 10
            while informer.counters.skipped < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert informer.counters.skipped == 2 and state.nodes["dra-1"].allocatable[GPU] == 8
    text = caplog.text
    assert "ResourceSlice dra-2-gpu.nvidia.com: spec.devices[3].capacity.memory.value" in text
    assert "ResourceSlice dra-1-gpu.nvidia.com: spec.devices must be a list" in text
    assert "devices no ResourceSlice publishes, not counted: dra-2/gpu-3" in text


# Stays on the fake: kube-apiserver reports an expired watch version as an ERROR event in the stream, with or
# without its watch cache (test_watch_real), never as an HTTP 410 answer to the watch request itself.
async def test_a_watch_request_answered_410_lists_again_and_the_state_matches_the_new_list(running: Running) -> None:
    await asyncio.wait_for(running.informer.wait_synced(), 10)
    fake = running.fake
    await running.until(lambda: len(fake.streams["pods"]) == 1)
    # while the informer is not looking: b is gone, e appeared on n3 (no event will say so)
    fake.objects["pods"].pop("ml/b")
    fake.seed("pods", bound("e", "n3", 2))
    fake.compact("pods")
    fake.gone_on_next_watch.add("pods")
    fake.drop("pods")
    await running.until(lambda: fake.lists.count("pods") == 2)
    await running.until(lambda: running.gpus_used("n3") == 2)
    assert running.gpus_used("n1") == 1 and running.gpus_used("n2") == 1
    assert sorted(running.state.pods) == ["uid-a", "uid-c", "uid-e"]
    assert running.informer.counters.relists == 1
    await running.until(lambda: fake.watches[-1] == ("pods", str(fake.version)))


# Stays on the fake: the real API server validates pods, so no watch of it streams a malformed one.
async def test_a_malformed_pod_is_skipped_and_the_watch_goes_on(running: Running) -> None:
    await asyncio.wait_for(running.informer.wait_synced(), 10)
    fake = running.fake
    broken = bound("broken", "n3")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    fake.raw_event("pods", "ADDED", broken)
    fake.raw_event("pods", "ADDED", {"metadata": {"namespace": "ml"}, "spec": {"nodeName": "n3"}})
    fake.event("pods", "ADDED", bound("g", "n3"))
    await running.until(lambda: running.gpus_used("n3") == 1)
    assert running.informer.counters.skipped == 2 and "uid-broken" not in running.state.pods


def test_apply_events_counts_bound_pods_and_skips_bad_ones() -> None:
    state = ClusterState()
    events = [
        {"type": "ADDED", "object": bound("a", "n1", 2)},
        {"type": "ADDED", "object": {"metadata": {}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "ADDED", "object": bound("b", "n1")},
        {"type": "DELETED", "object": bound("a", "n1", 2)},
    ]
    assert apply_events(state, "pods", events, policy()) == 1
    assert state.used("n1") == {GPU: 1, "cpu": 1000, "memory": 4 * 2**30}


def test_a_pod_was_bound_when_its_scheduled_condition_says_else_when_it_was_created() -> None:
    pod = bound("a", "n1")
    pod["metadata"]["creationTimestamp"] = "2026-11-29T09:00:00Z"
    assert bound_at(pod) == "2026-11-29T09:00:00Z"  # created with nodeName set: no PodScheduled condition
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T09:05:00Z"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T09:01:00Z"},
    ]
    assert bound_at(pod) == "2026-11-29T09:01:00Z"
    assert bound_at({"metadata": [], "status": {"conditions": "none"}}) == ""  # malformed: no order, no error


@pytest.mark.parametrize(
    ("spec", "status", "priority", "started"),
    [
        ({"priority": 10_000}, {"startTime": "2026-11-29T09:00:00Z"}, 10_000, 1_795_942_800.0),
        ({"priority": -100}, {"startTime": "2026-11-29T09:00:00.5+00:00"}, -100, 1_795_942_800.5),
        ({}, {}, 0, None),  # no PriorityClass resolved: kube-scheduler reads 0; not started yet
        ({"priority": "high"}, {"startTime": "yesterday"}, 0, None),  # malformed: as absent, never an error
        ({"priority": True}, {"startTime": 1795856400}, 0, None),
    ],
)
def test_the_watch_keeps_each_pods_priority_and_start_for_the_preempt_verb(
    spec: dict[str, Any], status: dict[str, Any], priority: int, started: float | None
) -> None:
    state = ClusterState()
    pod = bound("a", "n1")
    pod["spec"].update(spec)
    pod["status"].update(status)
    assert apply_events(state, "pods", [{"type": "ADDED", "object": pod}], policy()) == 0  # none skipped
    record = state.pods["uid-a"]
    assert (record.priority, record.started) == (priority, started)
