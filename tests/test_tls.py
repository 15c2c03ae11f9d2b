"""The webhook over a real TLS connection, trusting the generated CA, with a certificate rotation mid-stream."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from gpupack.certs.issue import KeyPair, issue_ca, issue_serving_cert, write_pair
from gpupack.certs.tls import server_context
from gpupack.core.server import ServeOptions, start_server
from gpupack.webhook.service import WebhookConfig, build_app
from tests.conftest import W, admission_review, make_pod, served_serial


@pytest.fixture
async def webhook_port(tls_dir: Path) -> AsyncIterator[int]:
    """A running webhook on a loopback port, serving tls_dir's certificate and polling it every 50 ms."""
    app = build_app(WebhookConfig(None, ServeOptions()), CollectorRegistry())
    options = ServeOptions("127.0.0.1", 0, tls_dir / "tls.crt", tls_dir / "tls.key", cert_poll_seconds=0.05)
    serving = await start_server(app, options)
    try:
        yield serving.port
    finally:
        await serving.stop()


async def test_rotation_during_a_stream_of_requests_fails_none(webhook_port: int, tls_dir: Path, ca: KeyPair) -> None:
    port, ca_file = webhook_port, tls_dir / "ca.crt"
    url = f"https://127.0.0.1:{port}/mutate?timeout=5s"
    client_tls = ssl.create_default_context(cafile=str(ca_file))
    body = orjson.dumps(admission_review(make_pod({W + "workload": "inference"})))
    before = await served_serial(port, ca_file)
    # One session keeps its connection alive across the rotation; the other opens a new one per request.
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as kept,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls, force_close=True)) as fresh,
    ):

        async def one(session: aiohttp.ClientSession) -> int:
            async with session.post(url, data=body) as resp:
                await resp.read()
                return resp.status

        statuses: list[int] = []
        for round_ in range(40):
            statuses += await asyncio.gather(*(one(kept if i % 2 else fresh) for i in range(6)))
            if round_ == 10:
                # A Secret update: a new serving certificate from the same CA lands on disk.
                write_pair(tls_dir, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
            await asyncio.sleep(0.01)
    after = await served_serial(port, ca_file)
    assert len(statuses) == 240 and set(statuses) == {200}
    assert before != after == x509.load_pem_x509_certificate((tls_dir / "tls.crt").read_bytes()).serial_number


async def test_client_that_does_not_trust_the_ca_is_refused(webhook_port: int, tls_dir: Path) -> None:
    other = tls_dir / "other"
    authority = issue_ca("someone-else")
    write_pair(other, authority, issue_serving_cert(authority, ["localhost"], []))
    context = ssl.create_default_context(cafile=str(other / "ca.crt"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        try:
            await session.get(f"https://127.0.0.1:{webhook_port}/healthz")
        except aiohttp.ClientConnectorCertificateError:
            pass
        else:
            raise AssertionError("a certificate from an untrusted CA was accepted")


async def test_tls_1_2_handshakes_and_nothing_older_is_offered(webhook_port: int, tls_dir: Path) -> None:
    context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    _reader, writer = await asyncio.open_connection("127.0.0.1", webhook_port, ssl=context)
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.2"
    writer.close()
    assert server_context(tls_dir / "tls.crt", tls_dir / "tls.key").minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize("stage", ["handshake", "headers", "body"])
async def test_a_slow_client_is_cut_off_at_every_stage(tls_dir: Path, stage: str) -> None:
    """A client that stalls in the TLS handshake, trickles its headers, or never finishes its body loses the
    connection (handshake timeout; the keep-alive timer, which partial headers do not reset; the body timeout)."""
    from gpupack.webhook.app import WebhookSettings

    app = build_app(
        WebhookConfig(None, ServeOptions(), settings=WebhookSettings(body_timeout=0.5)), CollectorRegistry()
    )
    options = ServeOptions(
        "127.0.0.1", 0, tls_dir / "tls.crt", tls_dir / "tls.key", handshake_timeout=0.5, keepalive_timeout=0.5
    )
    serving = await start_server(app, options)
    try:
        port = serving.port
        if stage == "handshake":
            reader, writer = await asyncio.open_connection("127.0.0.1", port)  # plain TCP: never says hello
            assert await asyncio.wait_for(reader.read(), 3) == b""
            writer.close()
            return
        context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        head = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        if stage == "headers":
            writer.write(head)
            for _ in range(10):  # one header line every 0.3 s: never idle, never done
                await asyncio.sleep(0.3)
                if reader.at_eof():
                    break
                writer.write(b"X-Slow: 1\r\n")
            assert await asyncio.wait_for(reader.read(), 3) == b""
        else:
            writer.write(head + b"Content-Length: 1000\r\n\r\n{")
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n"), 3)
            assert answer.startswith(b"HTTP/1.1 408")
        writer.close()
    finally:
        await serving.stop()
