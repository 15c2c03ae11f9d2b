"""Keeps a `ClusterState` current from a list + watch of nodes, pods, ResourceSlices and ResourceClaims, the way
client-go's reflector does.

Each kind is listed (paginated), applied whole, then watched from the list's resourceVersion; every event and
bookmark advances that version, so a dropped connection or the server's watch timeout resumes where it stopped.
`410 Gone` means the version is older than the API server keeps: list again. Other failures back off
(exponential, capped, jittered; reset once events flow again) and resume the watch.

ResourceSlices and ResourceClaims (DRA) are optional: a cluster without `resource.k8s.io/v1`, or an RBAC that does
not let the extender read them, answers 404 or 403. That counts as "no DRA devices" (the informer is synced
without them, logged once) and the list is tried again every `NOT_SERVED_RETRY` seconds.

The blocking client calls run in worker threads, which also reduce each object to the few fields kept
(`NodeRecord`, a pod's node and requests): 150,000 pods must fit in memory. `ClusterState` is not thread-safe,
so the reduced changes cross to the event loop in batches and are applied there by `apply_changes`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, Protocol

from gpupack.core.dra import ClaimDevices, DriverSlice
from gpupack.core.kube import Kind, NotServed, ResourceExpired
from gpupack.core.policy import Policy
from gpupack.extender.changes import (
    BAD_OBJECT,
    Change,
    PodChange,
    apply_changes,
    claim_change,
    pod_change,
    reduce_event,
    slice_change,
)
from gpupack.extender.demand import RequestsCache
from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.state import ClusterState

_BOUND_AT = attrgetter("bound_at")

log = logging.getLogger(__name__)

KINDS: tuple[Kind, ...] = ("nodes", "pods", "resourceslices", "resourceclaims")
NOT_SERVED_RETRY = 300.0
"""Seconds between lists of a DRA kind the API server does not serve or the extender may not read."""


# the seam to gpupack.core.kube ----------------------------------------------------------------------------------
class WatchStream(Protocol):
    """Events of one watch request; iterated in one thread, `close()` from another stops it."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class ListWatch(Protocol):
    """Blocking list and watch of raw objects (`gpupack.core.kube.RawListWatch`). Both raise ResourceExpired on 410."""

    def pages(self, kind: Kind) -> Iterable[tuple[list[dict[str, Any]], str]]: ...

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> WatchStream: ...


# the informer -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between failed attempts: `initial * factor**(n-1)` capped at `cap`, less up to `jitter` of it."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failure in a row (1, 2...)."""
        base = min(self.cap, self.initial * self.factor ** max(failures - 1, 0))
        return base * (1 - self.jitter * random.random())


@dataclass(slots=True)
class InformerCounters:
    """Running totals, read by whoever exports metrics (no prometheus objects here)."""

    events: int = 0
    """Watch events received (bookmarks and skipped objects included)."""
    skipped: int = 0
    """Malformed objects skipped, in lists and watches."""
    lists: int = 0
    """Full lists applied (the first of each kind included)."""
    relists: int = 0
    """Lists after the first, after a 410 Gone."""
    errors: int = 0
    """Failed lists and watches (each followed by a back-off)."""


class _Handoff:
    """Reduced events from one watch thread to the event loop. The thread appends; the loop applies what
    piled up, `batch` at a time so that a burst never holds the loop for long. At most one drain is scheduled
    at a time, so a burst costs one loop callback per batch; the thread waits when `limit` events are pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop, apply: Callable[[list[Change], str, int, int], None]) -> None:
        self._loop = loop
        self._apply = apply
        self._cond = threading.Condition()
        self._pending: deque[tuple[Change | None, str, int]] = deque()
        """(change or None, resourceVersion, skipped) per event, in stream order."""
        self._scheduled = False
        self._stream: WatchStream | None = None
        self.batch = 1_000
        self.limit = 20_000
        self.stopped = False

    def put(self, change: Change | None, version: str, skipped: int) -> None:
        """From the thread: one event's change (None for a bookmark or a skipped object) and its version."""
        with self._cond:
            while len(self._pending) >= self.limit and not self.stopped:
                self._cond.wait(0.5)
            self._pending.append((change, version, skipped))
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon_threadsafe(self.drain)

    def drain(self, everything: bool = False) -> None:
        """On the loop: apply the next batch of pending events (all of them with `everything`)."""
        with self._cond:
            count = len(self._pending) if everything else min(len(self._pending), self.batch)
            taken = [self._pending.popleft() for _ in range(count)]
            more = bool(self._pending)
            if more and not everything:
                self._loop.call_soon(self.drain)  # the rest after whatever else is ready
            else:
                self._scheduled = False
            self._cond.notify_all()
        if taken:
            version = next((v for _, v, _ in reversed(taken) if v), "")
            changes = [change for change, _, _ in taken if change is not None]
            self._apply(changes, version, len(taken), sum(skipped for _, _, skipped in taken))

    def attach(self, stream: WatchStream) -> bool:
        """From the thread: register the open stream; False (and the stream closed) when already stopped."""
        with self._cond:
            self._stream = stream
            stopped = self.stopped
        if stopped:
            stream.close()
        return not stopped

    def stop(self) -> None:
        """From the loop: close the stream, which unblocks the thread's read."""
        with self._cond:
            self.stopped = True
            stream = self._stream
            self._cond.notify_all()
        if stream is not None:
            stream.close()


class Informer:
    """Lists and watches nodes and pods into `state` until cancelled (`run()`); `synced` is set, and
    `state.synced` turned True, once both first lists are applied."""

    def __init__(
        self,
        source: ListWatch,
        state: ClusterState,
        policy: Callable[[], Policy],
        *,
        backoff: Backoff = Backoff(),
        watch_timeout: int = 300,
        counters: InformerCounters | None = None,
    ) -> None:
        self.source = source
        self.state = state
        self.policy = policy
        self.backoff = backoff
        self.watch_timeout = watch_timeout
        """Seconds the server keeps a watch open; each request asks for 1 to 2 times this, so the kinds'
        watches do not all restart together (client-go does the same)."""
        self.counters = counters or InformerCounters()
        self.resource_versions: dict[Kind, str] = {}
        """Where each kind's next watch starts: the list's version, then the last event's or bookmark's."""
        self.synced = asyncio.Event()
        self._failures: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        """Failed attempts since events last flowed (sets the back-off)."""
        self._expired: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        """410s since events last flowed."""
        self._listed_once: set[Kind] = set()
        self._not_served_kinds: set[Kind] = set()
        """Optional kinds whose last list was refused (403/404), logged once until a list succeeds."""
        self._requests = RequestsCache()

    async def run(self) -> None:
        """List and watch both kinds until cancelled."""
        async with asyncio.TaskGroup() as group:
            for kind in KINDS:
                group.create_task(self._run_kind(kind), name=f"informer-{kind}")

    async def wait_synced(self) -> None:
        """Return once both first lists are applied."""
        await self.synced.wait()

    async def _run_kind(self, kind: Kind) -> None:
        listed = False
        while True:
            try:
                if not listed:
                    await self._list(kind)
                    listed = True
                started = time.monotonic()
                events = await self._watch(kind)
                if events == 0 and time.monotonic() - started < 1.0:
                    raise ConnectionError("watch closed at once without events")
            except NotServed as exc:
                await self._not_served(kind, exc)
                listed = False
            except ResourceExpired as exc:
                # list again at once; back off only if 410s repeat with nothing applied in between (or the
                # list's own continue token expired), so a confused server is not hammered
                log.info("resourceVersion expired, listing again: %s", exc, extra={"kind": kind})
                self._expired[kind] += 1
                if not listed or self._expired[kind] > 1:
                    await self._failed(kind, exc)
                listed = False
            except Exception as exc:
                await self._failed(kind, exc)

    async def _not_served(self, kind: Kind, exc: NotServed) -> None:
        """An optional kind the cluster does not serve or the extender may not read: none of it, synced, retried."""
        if kind not in self._not_served_kinds:
            log.warning(
                "cannot list %s (%d: %s): placement counts device-plugin GPUs only; retrying every %.0fs",
                kind,
                exc.code,
                exc,
                NOT_SERVED_RETRY,
                extra={"kind": kind},
            )
            self._not_served_kinds.add(kind)
            self._applied(kind, [], "", 0, counted=False)
        await asyncio.sleep(NOT_SERVED_RETRY)

    async def _failed(self, kind: Kind, exc: Exception) -> None:
        self.counters.errors += 1
        self._failures[kind] += 1
        delay = self.backoff.delay(self._failures[kind])
        log.warning(
            "list/watch failed, retrying in %.2fs: %s: %s",
            delay,
            type(exc).__name__,
            exc,
            extra={"kind": kind, "version": self.resource_versions.get(kind, "")},
        )
        await asyncio.sleep(delay)

    # listing ---------------------------------------------------------------------------------------------------
    async def _list(self, kind: Kind) -> None:
        stop = threading.Event()
        job = asyncio.get_running_loop().run_in_executor(None, self._read_list, kind, self.policy(), stop)
        try:
            items, version, skipped = await asyncio.shield(job)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.wait([job])
            raise
        if kind in self._not_served_kinds:
            log.info("%s can be read again", kind, extra={"kind": kind})
            self._not_served_kinds.discard(kind)
        self._applied(kind, items, version, skipped)

    def _applied(self, kind: Kind, items: list[Any], version: str, skipped: int, counted: bool = True) -> None:
        """Replace everything of `kind` with a list's `items` (reduced as `_read_list` reduces them); `counted`:
        a list the server answered (not an optional kind found not served)."""
        if kind == "nodes":
            self.state.replace_nodes(items)
        elif kind == "pods":
            self.state.replace_pods(items)
        elif kind == "resourceslices":
            self.state.replace_slices(items)
        else:
            unknown = self.state.replace_claims(items)
            if unknown:
                log.warning(
                    "ResourceClaims hold %d devices no ResourceSlice publishes, not counted: %s",
                    len(unknown),
                    ", ".join(f"{pool}/{device}" for pool, device in unknown[:10]),
                )
        self.resource_versions[kind] = version
        self.counters.skipped += skipped
        self.counters.lists += counted
        self.counters.relists += counted and kind in self._listed_once
        self._failures[kind] = 0
        self._listed_once.add(kind)
        if len(self._listed_once) == len(KINDS) and not self.state.synced:
            self.state.synced = True
            self.synced.set()
            log.info("first list applied", extra={"nodes": len(self.state.nodes), "pods": len(self.state.pods)})

    def _read_list(self, kind: Kind, policy: Policy, stop: threading.Event) -> tuple[list[Any], str, int]:
        """In a thread: every page, reduced as it arrives (raw pages are dropped at once). The items are
        NodeRecords, (key, PodRecord) of bound pods, DriverSlices or ClaimDevices, by kind."""
        records: list[NodeRecord] = []
        pods: list[PodChange] = []
        published: list[DriverSlice] = []
        claims: list[ClaimDevices] = []
        version = ""
        skipped = 0
        shared = policy.time_slicing.resource_name
        for items, page_version in self.source.pages(kind):
            if stop.is_set():
                break  # cancelled: the result is dropped
            version = version or page_version
            for item in items:
                try:
                    if kind == "nodes":
                        records.append(node_from_json(item, policy))
                        continue
                    if kind == "resourceslices":
                        one = slice_change("ADDED", item).published
                        if one is not None:
                            published.append(one)
                        continue
                    if kind == "resourceclaims":
                        claim = claim_change("ADDED", item).claim
                        if claim is not None:
                            claims.append(claim)
                        continue
                    change = pod_change("ADDED", item, shared, self._requests)
                except BAD_OBJECT as exc:
                    skipped += 1
                    log.warning("skipping a malformed object: %s", exc, extra={"kind": kind})
                    continue
                if change.node is not None:
                    pods.append(change)
        if kind == "nodes":
            return records, version, skipped
        if kind == "resourceslices":
            return published, version, skipped
        if kind == "resourceclaims":
            return claims, version, skipped
        pods.sort(key=_BOUND_AT)  # the order they were bound, as their GPUs went out (stable: ties keep list order)
        return [(p.key, p.record()) for p in pods if p.node], version, skipped

    # watching --------------------------------------------------------------------------------------------------
    async def _watch(self, kind: Kind) -> int:
        """One watch request, applied as it streams; returns the events received once the server ends it."""
        loop = asyncio.get_running_loop()
        handoff = _Handoff(loop, partial(self._apply_batch, kind))
        timeout = int(self.watch_timeout * (1 + random.random()))
        version = self.resource_versions.get(kind, "")
        job = loop.run_in_executor(None, self._read_watch, kind, version, timeout, handoff)
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            handoff.stop()
            await asyncio.wait([job])
            raise
        finally:
            handoff.drain(everything=True)  # what the thread queued before it ended, before anything else

    def _read_watch(self, kind: Kind, version: str, timeout: int, handoff: _Handoff) -> int:
        """In a thread: read the stream, reduce each event, hand it over. Returns the events read."""
        stream = self.source.watch(kind, version, timeout)
        if not handoff.attach(stream):
            return 0
        count = 0
        try:
            for event in stream:
                count += 1
                obj = event.get("object")
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                event_version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
                change: Change | None = None
                skipped = 0
                try:
                    change = reduce_event(kind, event, self.policy(), self._requests)
                except BAD_OBJECT as exc:
                    skipped = 1
                    log.warning("skipping a malformed object: %s", exc, extra={"kind": kind})
                handoff.put(change, event_version, skipped)
                if count % 32 == 0:
                    # hand the GIL to the event loop now and then: without it a burst keeps the loop waiting
                    # whole switch intervals (5 ms) for it, and the verbs' latency shows it
                    time.sleep(0)
                if handoff.stopped:
                    break
        except Exception:
            if handoff.stopped:
                return count  # closed by stop(): the read error is ours
            raise
        finally:
            stream.close()
        return count

    def _apply_batch(self, kind: Kind, changes: list[Change], version: str, events: int, skipped: int) -> None:
        apply_changes(self.state, changes)
        if version:
            self.resource_versions[kind] = version
        self.counters.events += events
        self.counters.skipped += skipped
        # events flow again: the next failure starts the back-off over
        self._failures[kind] = self._expired[kind] = 0
