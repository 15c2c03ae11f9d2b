"""How many connections one listener holds, what each costs, and giving the memory back when they close.

A client that opens connections and sends nothing must not be able to take a service down. Measured on the
webhook before this module (2026-12-01): 600 plain TCP connections that never start the TLS handshake took it
from 70 MB to 249 MB, over its 256 Mi limit, and 1,000 idle TLS connections to 344 MB; the memory stayed after
they closed. Three things caused it, and each has its answer here:

- asyncio's TLS protocol allocates and zero-fills a 256 KiB read buffer per connection when it is accepted,
  before any byte arrives. `GuardedTLS` reads in 16 KiB, the size of one TLS record's payload (1,000 idle TLS
  connections: +40 MB instead of +275 MB).
- Nothing bounded the connections held. `ConnectionGuard` keeps at most `limit` per listener. At the limit a
  new connection closes, among those with no request in progress, the one that has sent nothing for longest,
  preferring one that never sent a request. Closing a connection idle in a handshake or between keep-alive
  requests costs its client a reconnect (the API server retries a request whose idle connection was closed);
  a request in flight is never cut. Only when every held connection is busy is the new one refused. Without
  authentication no rule can tell a hostile idle connection from a client's: what the bound guarantees is the
  memory, and that a new connection (the API server's next request) is always served.
- glibc keeps freed memory in its heap. When enough connections have closed, `trim_memory` asks it to give the
  free pages back (`malloc_trim`), at most every few seconds (1,000 TLS connections closed: back to within
  5 MB of the start, instead of none of it).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpupack.core.logs import RateLimit

log = logging.getLogger(__name__)

TLS_READ_BUFFER = 16 * 1024
"""Bytes a TLS connection reads from its socket at a time: one TLS record's payload (asyncio's default is
256 KiB, allocated for every connection accepted)."""

TLS_READ_AHEAD = 32 * 1024
"""Encrypted bytes a TLS connection takes from its socket before it stops reading until the request handler
catches up (asyncio's default is 256 KiB). With aiohttp's own read-ahead (`READ_BUFSIZE`) this bounds what a
connection that sends a body nobody reads yet can make the process hold: 256 connections each sending 3 MiB
of body took the webhook to 252 MB with the defaults."""

READ_BUFSIZE = 16 * 1024
"""aiohttp's read-ahead unit for request bodies (default 64 KiB): it stops reading at twice this."""

SLOW_BODY_SECONDS = 0.25
"""A request whose body has been awaited this long is a slow client's: the API server and kube-scheduler send a
body of a few KiB in one write, on a network inside the cluster. At the connection limit such a connection may be
closed to make room."""

PEER_SHARE = 4
"""One client address holds at most 1/PEER_SHARE of a listener's connections: a pod that floods the webhook with
connections (trickling bodies, reconnecting as soon as one is cut) takes a quarter of them, not all, and the API
servers keep the rest. An API server needs a few keep-alive connections, tens in a burst."""

DEFAULT_LIMIT = 256
"""Connections one listener holds. The API servers of a cluster keep a few keep-alive connections each to a
webhook (tens in a burst) and kube-scheduler one or two to its extender: 256 is ample for them and bounds the
memory of idle ones at about 10 MB."""


class ConnectionMetrics:
    """`gpupack_server_connections{listener}` and the connections evicted or refused at the limit."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge(
            "gpupack_server_connections", "Connections held, by listener.", ["listener"], registry=registry
        )
        self.evicted = Counter(
            "gpupack_server_connections_evicted_total",
            "Idle connections closed to make room for a new one at the connection limit.",
            ["listener"],
            registry=registry,
        )
        self.refused = Counter(
            "gpupack_server_connections_refused_total",
            "New connections closed at once because every connection held was busy with a request.",
            ["listener"],
            registry=registry,
        )


def _abort(transport: asyncio.BaseTransport) -> None:
    """Close at once, dropping whatever is unsent (the connection is idle or being refused)."""
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


@dataclass(slots=True)
class _Held:
    transport: asyncio.BaseTransport
    handler: Any
    """aiohttp's RequestHandler for the connection: it knows whether a request is in progress."""
    peer: str
    active: float
    """Loop time bytes last arrived (or the connection was accepted)."""


def _peer(transport: asyncio.BaseTransport) -> str:
    """The client's address (without its port): what the per-client share counts."""
    name = transport.get_extra_info("peername")
    return str(name[0]) if isinstance(name, tuple) and name else "?"


def _busy(handler: Any) -> bool:
    """Whether the connection is serving a request (or has one queued), so closing it would lose work.

    Reads aiohttp's RequestHandler state (`_request_in_progress`, `_messages`); when aiohttp no longer has them
    the connection counts as busy, so nothing in flight is ever cut (the eviction tests would then fail).
    """
    return bool(getattr(handler, "_request_in_progress", True) or getattr(handler, "_messages", True))


def _slow(handler: Any, awaiting: dict[object, float], now: float) -> float | None:
    """How long the connection's request has been waiting for its body, when that is longer than
    SLOW_BODY_SECONDS; None otherwise."""
    since = awaiting.get(handler)
    if since is None or now - since < SLOW_BODY_SECONDS:
        return None
    return now - since


def _served(handler: Any) -> bool:
    """Whether the connection has sent at least one request (a client's keep-alive connection, not a probe)."""
    return bool(getattr(handler, "_request_count", 1))


class ConnectionGuard:
    """The connections of one listener, least recently active first; `admit` makes room at the limit or refuses.

    A connection moves to the end whenever bytes arrive on it (`touch`), so at the limit the one evicted is the
    one that has gone longest without sending anything, among those with no request in progress.
    """

    def __init__(
        self,
        limit: int,
        listener: str,
        metrics: ConnectionMetrics | None = None,
        awaiting: dict[object, float] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"the connection limit must be at least 1, got {limit}")
        self.limit = limit
        self.listener = listener
        self._held: dict[object, _Held] = {}
        self.closed = 0
        """Connections released so far (the memory trimmer watches it)."""
        self._metrics = metrics
        self.awaiting: dict[object, float] = awaiting if awaiting is not None else {}
        """Request handlers waiting for the rest of a body, and since when (loop time): `gpupack.core.server.read_body`
        fills it."""
        self._refusals = RateLimit(10.0)
        self.per_peer = max(1, limit // PEER_SHARE)
        """Connections one client address may hold."""
        self._by_peer: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._held)

    def touch(self, key: object) -> None:
        """Bytes arrived on connection `key`: it is now the most recently active (a dict re-insert, O(1))."""
        held = self._held.pop(key, None)
        if held is not None:
            held.active = asyncio.get_running_loop().time()
            self._held[key] = held

    def _victim(self, peer: str | None = None) -> object | None:
        """The connection to close to make room (with `peer`, among that client's only), in this order:

        1. idle, never sent a request, silent for SLOW_BODY_SECONDS or more (a socket opened and left);
        2. waiting for the rest of a body for SLOW_BODY_SECONDS or more, the longest first (a body trickling in);
        3. idle between requests (a keep-alive client: it reconnects; the API server retries such a request);
        4. idle and new (a handshake, a request on its way).
        The least recently active first within 1, 3 and 4; a request being served is never cut. Without 2, a few
        hundred clients trickling bodies kept every connection busy and every new one, the API server's too,
        was refused; with 3 before 2, they pushed out the API server's keep-alive connections instead.
        """
        now = asyncio.get_running_loop().time()
        slowest: tuple[float, object] | None = None
        kept_alive: object | None = None
        new: object | None = None
        for key, held in self._held.items():
            if peer is not None and held.peer != peer:
                continue
            if _busy(held.handler):
                waited = _slow(held.handler, self.awaiting, now) if self.awaiting else None
                if waited is not None and (slowest is None or waited > slowest[0]):
                    slowest = (waited, key)
            elif _served(held.handler):
                kept_alive = key if kept_alive is None else kept_alive
            elif now - held.active >= SLOW_BODY_SECONDS:
                return key
            else:
                new = key if new is None else new
        if slowest is not None:
            return slowest[1]
        return kept_alive if kept_alive is not None else new

    def admit(self, key: object, transport: asyncio.BaseTransport, handler: Any) -> bool:
        """Hold a new connection; False when it must be closed at once (the limit, or its client's share, is
        reached and every connection that could make room is busy)."""
        peer = _peer(transport)
        if self._by_peer.get(peer, 0) >= self.per_peer:  # room from the client's own connections only
            if not self._make_room(self._victim(peer), f"its client {peer} holds {self.per_peer} busy connections"):
                return False
        elif len(self._held) >= self.limit:
            if not self._make_room(self._victim(), f"all {self.limit} connections are busy"):
                return False
        self._held[key] = _Held(transport, handler, peer, asyncio.get_running_loop().time())
        self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
        if self._metrics is not None:
            self._metrics.open.labels(self.listener).set(len(self._held))
        return True

    def _make_room(self, victim: object | None, why: str) -> bool:
        """Close `victim` to make room; False (counted, logged at most every 10 s) when there is none."""
        if victim is None:
            if self._metrics is not None:
                self._metrics.refused.labels(self.listener).inc()
            held_back = self._refusals.allow()
            if held_back is not None:
                more = f" ({held_back} more since the last line)" if held_back else ""
                log.warning("connection refused: %s%s", why, more)
            return False
        evicted = self._forget(victim)
        if evicted is not None:
            _abort(evicted.transport)  # its protocol's connection_lost follows; release() then finds nothing
        if self._metrics is not None:
            self._metrics.evicted.labels(self.listener).inc()
        return True

    def _forget(self, key: object) -> _Held | None:
        """Stop holding connection `key` (closed, or being closed); None when it was not held."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        self.closed += 1
        left = self._by_peer[held.peer] - 1
        if left:
            self._by_peer[held.peer] = left
        else:
            del self._by_peer[held.peer]
        return held

    def release(self, key: object) -> None:
        """Forget a closed connection."""
        if self._forget(key) is not None:
            if self._metrics is not None:
                self._metrics.open.labels(self.listener).set(len(self._held))


class _Guarded:
    """What both connection kinds do first and last: ask the guard for room, and give it back."""

    _guard: ConnectionGuard
    _handler: Any
    _admitted = False

    def _admit(self, transport: asyncio.BaseTransport) -> bool:
        """Hold the connection, or close it at once; True when the connection may go on."""
        self._admitted = self._guard.admit(self, transport, self._handler)
        if not self._admitted:
            _abort(transport)
        return self._admitted

    def _release(self) -> bool:
        """Give the connection's room back; False when it never had any (refused: nothing else to undo)."""
        if self._admitted:
            self._guard.release(self)
        return self._admitted


class GuardedTLS(_Guarded, sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol with a 16 KiB read buffer, held by a ConnectionGuard.

    `loop.create_server(ssl=...)` builds the same protocol with a 256 KiB buffer and no hook for either; the
    listener builds this one itself and serves it as a plain TCP protocol, which is what asyncio does inside.
    """

    max_size = TLS_READ_BUFFER

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        handler: asyncio.BaseProtocol,
        context: Any,
        handshake_timeout: float,
        guard: ConnectionGuard,
    ) -> None:
        # No waiter: nothing awaits the handshake (asyncio's own accept path awaits one only to log failures).
        super().__init__(
            loop,
            handler,
            context,
            None,  # type: ignore[arg-type]
            server_side=True,
            ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
        )
        self._guard = guard
        self._handler = handler
        self._set_read_buffer_limits(TLS_READ_AHEAD)  # type: ignore[attr-defined]  # asyncio.sslproto, 3.11+

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._admit(transport):
            super().connection_made(transport)

    def buffer_updated(self, nbytes: int) -> None:
        self._guard.touch(self)
        super().buffer_updated(nbytes)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._release():
            super().connection_lost(exc)


class GuardedPlain(_Guarded, asyncio.Protocol):
    """A plain HTTP connection held by a ConnectionGuard: forwards every event to aiohttp's RequestHandler."""

    def __init__(self, handler: Any, guard: ConnectionGuard) -> None:
        self._handler = handler
        self._guard = guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._admit(transport):
            self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._guard.touch(self)
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self._handler.eof_received()
        return result

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._release():
            self._handler.connection_lost(exc)


def protocol_factory(
    loop: asyncio.AbstractEventLoop,
    handlers: Callable[[], Any],
    guard: ConnectionGuard,
    tls: Any | None,
    handshake_timeout: float,
) -> Callable[[], asyncio.BaseProtocol]:
    """The protocol factory of one listener: each connection held by `guard`, over TLS when `tls` is a context."""
    if tls is None:
        return lambda: GuardedPlain(handlers(), guard)
    return lambda: GuardedTLS(loop, handlers(), tls, handshake_timeout, guard)


TRIM_AFTER = 32
"""Connections closed before the memory they held is handed back to the operating system."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


async def trim_memory(
    guards: list[ConnectionGuard], interval: float = 5.0, trim: Callable[[int], object] | None = None
) -> None:
    """Every `interval` seconds, if at least TRIM_AFTER connections closed since the last trim, ask the C library
    to return its free heap pages (`trim`: glibc's `malloc_trim` by default); runs until cancelled."""
    trim = trim or _malloc_trim()
    if trim is None:
        return
    seen = sum(g.closed for g in guards)
    while True:
        await asyncio.sleep(interval)
        closed = sum(g.closed for g in guards)
        if closed - seen >= TRIM_AFTER:
            seen = closed
            trim(0)
