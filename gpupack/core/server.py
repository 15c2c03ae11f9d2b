"""Server bootstrap shared by the webhook and the extender: listeners with bounded connections, TLS with live
certificate reload, a health and metrics listener, bounded request bodies and timeouts, graceful shutdown.

Slow or idle clients are cut off at every stage: the number of connections held (`gpupack.core.connections`), the TLS
handshake (`handshake_timeout`), the request headers and idle keep-alive connections (aiohttp's keep-alive
timer, which partial headers do not reset: `keepalive_timeout`), and the request body (`read_body`).

Exceptions raised by `read_body`, each with the HTTP status the webhook answers:

    BodyError           the request body cannot be used
      BodyTimeout       408: it did not arrive in time
      BodyTooLarge      413: it is (or says it is) larger than the limit
      BodyUnreadable    400: its Content-Encoding does not decode, or the connection broke mid-body
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from gpupack.certs.tls import server_context, validity
from gpupack.core.certwatch import CertificateReloader
from gpupack.core.connections import (
    DEFAULT_LIMIT,
    READ_BUFSIZE,
    ConnectionGuard,
    ConnectionMetrics,
    protocol_factory,
    trim_memory,
)
from gpupack.core.malformed import ProtocolLog

log = logging.getLogger(__name__)

REGISTRY = web.AppKey("registry", CollectorRegistry)
READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
AWAITING: web.AppKey[dict[object, float]] = web.AppKey("awaiting")
"""Request handlers waiting for the rest of a body, since when (loop time): what the connection guard may cut."""


class BodyError(Exception):
    """The request body cannot be used; `status` is the HTTP answer and `reason` the metric label."""

    status = 400
    reason = "unreadable"


class BodyTimeout(BodyError):
    """The client did not send its whole body in time."""

    status = 408
    reason = "timeout"


class BodyTooLarge(BodyError):
    """The body is, or its Content-Length says it will be, larger than the limit."""

    status = 413
    reason = "too_large"


class BodyUnreadable(BodyError):
    """The body does not decode (a Content-Encoding that is not what it says) or broke off."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Listening addresses and limits of one server."""

    host: str = ""
    """Empty: every interface, IPv4 and IPv6."""
    port: int = 8443
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    """With TLS: clients must present a certificate this CA signed."""
    cert_poll_seconds: float = 10.0
    handshake_timeout: float = 10.0
    keepalive_timeout: float = 75.0
    shutdown_timeout: float = 15.0
    max_connections: int = DEFAULT_LIMIT
    """Connections each listener holds (see `gpupack.core.connections`)."""
    health_host: str = ""
    health_port: int | None = None
    """A second, plain HTTP listener for `/healthz`, `/readyz` and `/metrics` only (None: none): what the kubelet
    and Prometheus reach on the pod IP, when the main listener is on loopback or needs a client certificate."""

    @property
    def tls(self) -> bool:
        """Whether the main listener speaks TLS."""
        return self.cert_file is not None and self.key_file is not None


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from inside the pod (the kubelet and other pods cannot connect). An empty
    host is every interface: not loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def read_body(request: web.Request, timeout: float, limit: int) -> bytes:
    """The whole body within `timeout` seconds and `limit` bytes. Raises BodyTooLarge (at once when the
    Content-Length says so: waiting for a body that will be refused only holds the connection), BodyTimeout,
    or BodyUnreadable (a `Content-Encoding`: the API server and kube-scheduler send bodies as they are, and a
    compressed body can be a bomb; or the client went away mid-body).

    The timer is armed only when part of the body has yet to arrive. Clients (the API server, kube-scheduler)
    send a request in one write, so by the time a handler runs aiohttp has usually parsed the whole body:
    reading it then cannot block, and arming `asyncio.timeout` (a timer scheduled and cancelled on the event
    loop) cost about 30 µs per request on the webhook benchmark. A slow client still meets the timeout, and
    while it sends, its connection is marked as waiting (`AWAITING`), so that at the connection limit it may be
    closed to make room.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"the request body ({declared} bytes) exceeds the {limit}-byte limit")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        raise BodyUnreadable(
            f"the request body cannot be read (Content-Encoding: {encoding[:40]}): send it uncompressed"
        )
    try:
        if request.content.is_eof():
            return await request.read()
        awaiting = request.app.get(AWAITING)
        if awaiting is not None:
            awaiting[request.protocol] = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(timeout):  # unlike wait_for, no extra task per request
                return await request.read()
        except TimeoutError as exc:
            raise BodyTimeout(f"the request body did not arrive within {timeout:g}s") from exc
        finally:
            if awaiting is not None:
                awaiting.pop(request.protocol, None)
    except web.HTTPRequestEntityTooLarge as exc:
        raise BodyTooLarge(f"the request body exceeds the {limit}-byte limit") from exc
    except (RequestPayloadError, ConnectionError) as exc:
        raise BodyUnreadable(f"the request body cannot be read: {exc}") from exc


async def _healthz(_request: web.Request) -> web.Response:
    """200 `ok` while the process answers: the liveness probe. It checks nothing else, so a slow API server or
    Prometheus never gets a healthy pod restarted."""
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    """200 `ready` once the service can do its job, else 503 `not ready`: the readiness probe. The webhook is
    ready once it serves; the extender once its first list of nodes and pods is in (before that it would judge
    an empty cluster)."""
    if request.app[READY]():
        return web.Response(text="ready\n")
    return web.Response(status=503, text="not ready\n")


async def _metrics(request: web.Request) -> web.Response:
    """The Prometheus text exposition of the service's metrics."""
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_standard_routes(app: web.Application, registry: CollectorRegistry, ready: Callable[[], bool]) -> None:
    """`/healthz` (the process answers), `/readyz` (it can do its job), `/metrics` (Prometheus text)."""
    app[REGISTRY] = registry
    app[READY] = ready
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)


class ServingMetrics:
    """What the listeners export: connections, the certificate's expiry and reloads, malformed requests."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connections = ConnectionMetrics(registry)
        self.certificate_expiry = Gauge(
            "gpupack_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (Unix time).",
            registry=registry,
        )
        self.certificate_failures = Counter(
            "gpupack_certificate_reload_failures_total",
            "Certificate files that changed but were not loaded: unreadable, mismatched, expired or not yet valid.",
            registry=registry,
        )
        self.malformed = Counter(
            "gpupack_server_malformed_requests_total",
            "HTTP requests that did not parse (answered 400 by the HTTP layer).",
            registry=registry,
        )


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections a ConnectionGuard holds, over TLS (with a handshake deadline; aiohttp's
    TCPSite leaves asyncio's 60 s default) or plain HTTP."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        handshake: float,
        guard: ConnectionGuard,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._handshake, self.guard = host, port, handshake, guard

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        port = self.bound_port() if isinstance(self._server, asyncio.Server) else self._port
        return f"{scheme}://{self._host or '*'}:{port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        factory = protocol_factory(loop, server, self.guard, self._ssl_context, self._handshake)
        if self._host:
            self._server = await loop.create_server(factory, self._host, self._port, reuse_address=True)
            return
        try:  # all interfaces: IPv4 and IPv6, so probes reach the pod on single-stack IPv6 clusters too
            self._server = await loop.create_server(factory, None, self._port, reuse_address=True)
        except OSError as exc:  # IPv6 disabled in the pod's network namespace: IPv4 alone
            log.info("cannot listen on IPv6 too (%s); listening on IPv4 only", exc)
            self._server = await loop.create_server(factory, "0.0.0.0", self._port, reuse_address=True)

    def bound_port(self) -> int:
        """The port actually bound (useful with port 0)."""
        server = self._server
        assert isinstance(server, asyncio.Server) and server.sockets
        port: int = server.sockets[0].getsockname()[1]
        return port


@dataclass(slots=True)
class Serving:
    """A running server: its main listener, its health listener if any, and its background tasks."""

    runners: list[web.AppRunner]
    site: GuardedSite
    health: GuardedSite | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def port(self) -> int:
        """The main listener's port."""
        return self.site.bound_port()

    @property
    def health_port(self) -> int | None:
        """The health listener's port."""
        return None if self.health is None else self.health.bound_port()

    async def stop(self) -> None:
        """Stop the background tasks, then finish requests in flight and close every listener."""
        await _cancel(self.tasks)
        for runner in reversed(self.runners):
            await runner.cleanup()


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _tls(options: ServeOptions, metrics: ServingMetrics) -> tuple[ssl.SSLContext, CertificateReloader]:
    assert options.cert_file is not None and options.key_file is not None
    cert, key = options.cert_file, options.key_file
    expires = validity(cert)  # an expired certificate would load and then fail every client: refuse to start
    context = server_context(cert, key, options.client_ca_file)
    reloader = CertificateReloader(
        context,
        cert,
        key,
        expires,
        on_loaded=lambda when: metrics.certificate_expiry.set(when.timestamp()),
        on_failure=lambda _problem: metrics.certificate_failures.inc(),
    )
    return context, reloader


async def _listen(
    app: web.Application,
    host: str,
    port: int,
    context: ssl.SSLContext | None,
    options: ServeOptions,
    name: str,
    metrics: ServingMetrics,
) -> tuple[web.AppRunner, GuardedSite]:
    awaiting: dict[object, float] = {}
    app[AWAITING] = awaiting
    runner = web.AppRunner(
        app,
        access_log=None,
        keepalive_timeout=options.keepalive_timeout,
        shutdown_timeout=options.shutdown_timeout,
        logger=ProtocolLog(logging.getLogger("aiohttp.server"), metrics.malformed.inc),
        read_bufsize=READ_BUFSIZE,
        # Bodies are refused with a Content-Encoding before they are read (`read_body`): never decompress one.
        auto_decompress=False,
        # What a refused client still sends is read and dropped for at most 2 s (aiohttp's default: 10 s).
        lingering_time=2.0,
    )
    await runner.setup()
    guard = ConnectionGuard(options.max_connections, name, metrics.connections, awaiting)
    site = GuardedSite(runner, host, port, context, options.handshake_timeout, guard)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    log.info("%s listener on %s", name, site.name)
    return runner, site


async def start_server(app: web.Application, options: ServeOptions) -> Serving:
    """Start serving `app` (and, with `health_port`, its standard routes on a second listener).

    Raises OSError / ssl.SSLError when the certificate files cannot be loaded, and CertificateProblem when the
    certificate has expired or is not valid yet: a server must not start with a certificate clients refuse.
    """
    registry = app.get(REGISTRY) or CollectorRegistry()
    metrics = ServingMetrics(registry)
    context: ssl.SSLContext | None = None
    tasks: list[asyncio.Task[None]] = []
    if options.tls:
        context, reloader = _tls(options, metrics)
        tasks.append(asyncio.create_task(reloader.run(options.cert_poll_seconds)))
    try:
        runner, site = await _listen(app, options.host, options.port, context, options, "serving", metrics)
    except BaseException:
        await _cancel(tasks)
        raise
    serving = Serving([runner], site, tasks=tasks)
    try:
        if options.health_port is not None:
            health_app = web.Application()
            add_standard_routes(health_app, registry, app.get(READY) or (lambda: True))
            health_runner, serving.health = await _listen(
                health_app, options.health_host, options.health_port, None, options, "health", metrics
            )
            serving.runners.append(health_runner)
    except BaseException:  # the port is taken, say: nothing of the half-started server may stay behind
        await serving.stop()
        raise
    guards = [site.guard] + ([serving.health.guard] if serving.health else [])
    tasks.append(asyncio.create_task(trim_memory(guards)))
    return serving


async def serve_forever(app: web.Application, options: ServeOptions) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, finish requests in flight and clean up."""
    serving = await start_server(app, options)
    # Everything loaded so far lives as long as the process: keep it out of every garbage collection.
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await serving.stop()
