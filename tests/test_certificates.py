"""Serving certificates as mounted Secrets change: only a valid certificate is ever served, a vanished file is
said once, the expiry is exported, and the extender off loopback demands client certificates."""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client import CollectorRegistry

from gpupack.certs.issue import KeyPair, issue_ca, issue_serving_cert, write_pair
from gpupack.certs.tls import CertificateProblem
from gpupack.cli import main
from gpupack.core.server import REGISTRY, ServeOptions, Serving, start_server
from gpupack.webhook.service import WebhookConfig, build_app
from tests.conftest import served_serial, wait_until

NOW = datetime.datetime.now(datetime.UTC)


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def _volume(directory: Path, ca: KeyPair, pair: KeyPair, generation: int) -> None:
    """A Secret volume as the kubelet writes it: files in `..data/` behind symlinks, swapped atomically."""
    data = directory / f"..{generation}"
    write_pair(data, ca, pair)
    link = directory / "..data"
    tmp = directory / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(data.name)
    tmp.replace(link)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


@pytest.mark.parametrize(
    ("valid_from", "days", "problem"),
    [(NOW - datetime.timedelta(days=30), 10, "expired at"), (NOW + datetime.timedelta(days=1), 10, "not valid before")],
)
async def test_a_server_does_not_start_with_a_certificate_clients_refuse(
    tmp_path: Path, ca: KeyPair, valid_from: datetime.datetime, days: int, problem: str
) -> None:
    write_pair(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=days, valid_from=valid_from))
    app = build_app(WebhookConfig(None, ServeOptions()), CollectorRegistry())
    with pytest.raises(CertificateProblem, match=problem):
        await start_server(app, ServeOptions("127.0.0.1", 0, tmp_path / "tls.crt", tmp_path / "tls.key"))


async def _serve(directory: Path, registry: CollectorRegistry, poll: float = 0.02) -> Serving:
    """The webhook serving `directory`'s certificate, polling it every `poll` seconds."""
    app = build_app(WebhookConfig(None, ServeOptions()), registry)
    options = ServeOptions("127.0.0.1", 0, directory / "tls.crt", directory / "tls.key", cert_poll_seconds=poll)
    return await start_server(app, options)


@pytest.mark.parametrize(
    ("valid_from", "problem"),
    [(NOW - datetime.timedelta(days=30), "expired at"), (NOW + datetime.timedelta(days=1), "not valid before")],
)
async def test_a_rotation_to_an_invalid_certificate_keeps_the_current_one(
    tmp_path: Path, ca: KeyPair, caplog: pytest.LogCaptureFixture, valid_from: datetime.datetime, problem: str
) -> None:
    _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]), 1)
    first = _serial(tmp_path / "tls.crt")
    registry = CollectorRegistry()
    serving = await _serve(tmp_path, registry)
    try:
        expiry = registry.get_sample_value("gpupack_certificate_expiry_timestamp_seconds")
        assert expiry is not None and expiry > NOW.timestamp() + 300 * 86400
        with caplog.at_level(logging.WARNING):
            _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"], 10, valid_from), 2)
            await wait_until(lambda: registry.get_sample_value("gpupack_certificate_reload_failures_total") == 1)
            await asyncio.sleep(0.1)  # several more polls: still said once
        assert await served_serial(serving.port, tmp_path / "ca.crt") == first
        said = [r.getMessage() for r in caplog.records if "not reloaded" in r.getMessage()]
        assert len(said) == 1 and problem in said[0]
        assert registry.get_sample_value("gpupack_certificate_reload_failures_total") == 1
        assert registry.get_sample_value("gpupack_certificate_expiry_timestamp_seconds") == expiry

        _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=200), 3)
        third = _serial(tmp_path / "tls.crt")
        await wait_until(lambda: registry.get_sample_value("gpupack_certificate_expiry_timestamp_seconds") != expiry)
        assert await served_serial(serving.port, tmp_path / "ca.crt") == third
    finally:
        await serving.stop()


async def test_a_certificate_not_valid_yet_is_taken_once_its_time_comes(tmp_path: Path, ca: KeyPair) -> None:
    """Time alone makes it valid: the reloader tries again at every poll, not only when the files change."""
    _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]), 1)
    serving = await _serve(tmp_path, CollectorRegistry(), poll=0.05)
    try:
        # whole seconds in X.509: valid from 2-3 s from now, checked at 0.5 s
        soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
        _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"], valid_from=soon), 2)
        later = _serial(tmp_path / "tls.crt")
        await asyncio.sleep(0.5)
        assert await served_serial(serving.port, tmp_path / "ca.crt") != later
        deadline = asyncio.get_running_loop().time() + 10
        while await served_serial(serving.port, tmp_path / "ca.crt") != later:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.1)
    finally:
        await serving.stop()


async def test_a_certificate_gone_from_the_mount_is_said_and_the_current_one_stays(
    tmp_path: Path, ca: KeyPair, caplog: pytest.LogCaptureFixture
) -> None:
    """A key removed from the Secret leaves a dangling symlink; it was skipped in silence."""
    _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]), 1)
    first = _serial(tmp_path / "tls.crt")
    registry = CollectorRegistry()
    serving = await _serve(tmp_path, registry)
    try:
        with caplog.at_level(logging.WARNING):
            (tmp_path / "..1" / "tls.crt").unlink()
            await wait_until(lambda: registry.get_sample_value("gpupack_certificate_reload_failures_total") == 1)
            await asyncio.sleep(0.1)
        said = [r.getMessage() for r in caplog.records if "not reloaded" in r.getMessage()]
        assert len(said) == 1 and "dangling symlink" in said[0] and "tls.crt" in said[0]
        assert await served_serial(serving.port, tmp_path / "ca.crt") == first
    finally:
        await serving.stop()


async def test_the_expiry_metric_is_on_the_health_listener(tls_dir: Path) -> None:
    registry = CollectorRegistry()
    app = build_app(WebhookConfig(None, ServeOptions()), registry)
    options = ServeOptions(
        "127.0.0.1", 0, tls_dir / "tls.crt", tls_dir / "tls.key", health_host="127.0.0.1", health_port=0
    )
    serving = await start_server(app, options)
    try:
        assert serving.site._runner.app[REGISTRY] is registry  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{serving.health_port}/metrics") as response:
                text = await response.text()
        expected = x509.load_pem_x509_certificate((tls_dir / "tls.crt").read_bytes()).not_valid_after_utc
        line = next(x for x in text.splitlines() if x.startswith("gpupack_certificate_expiry_timestamp_seconds "))
        assert float(line.split()[1]) == expected.timestamp()
    finally:
        await serving.stop()


# the extender off loopback --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--cert-file", "tls.crt", "--key-file", "tls.key"],  # TLS, but anyone may call
    ],
)
def test_the_extender_refuses_to_serve_its_verbs_off_loopback_without_client_certificates(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["extender", "--nodes", "/dev/null", "--host", "0.0.0.0", *extra])
    assert code == 2 and "--client-ca-file" in capsys.readouterr().err


async def test_off_loopback_only_a_client_with_a_certificate_from_the_ca_may_call(tls_dir: Path, ca: KeyPair) -> None:
    from gpupack.extender.app import make_app
    from tests.extender_kit import extender_for, recorded_args, recorded_nodes, registry

    clients = tls_dir / "clients"
    write_pair(clients, ca, issue_serving_cert(ca, ["gpupack-scheduler"], [], usage=ExtendedKeyUsageOID.CLIENT_AUTH))
    stranger_ca = issue_ca("someone-else")
    strangers = tls_dir / "strangers"
    write_pair(
        strangers,
        stranger_ca,
        issue_serving_cert(stranger_ca, ["intruder"], [], usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    options = ServeOptions("127.0.0.1", 0, tls_dir / "tls.crt", tls_dir / "tls.key", client_ca_file=tls_dir / "ca.crt")
    serving = await start_server(make_app(extender_for(recorded_nodes()), registry()), options)
    url = f"https://127.0.0.1:{serving.port}/filter"
    args = recorded_args("000-filter-llm-infer-7b-abc12.json")

    async def call(directory: Path | None) -> int:
        context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
        if directory is not None:
            context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(url, json=args) as response,
        ):
            return response.status

    try:
        assert await call(clients) == 200
        for directory in (None, strangers):
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                await call(directory)
    finally:
        await serving.stop()


async def test_gpupack_certs_issues_the_client_certificate_kube_scheduler_presents(tmp_path: Path) -> None:
    """The README's way to run the extender off loopback: one `gpupack certs` call, both sides from one CA."""
    from gpupack.extender.app import make_app
    from tests.extender_kit import extender_for, recorded_args, recorded_nodes, registry

    assert main(["certs", "--out", str(tmp_path), "--ip", "127.0.0.1", "--client", "gpupack-scheduler"]) == 0
    options = ServeOptions(
        "127.0.0.1", 0, tmp_path / "tls.crt", tmp_path / "tls.key", client_ca_file=tmp_path / "ca.crt"
    )
    serving = await start_server(make_app(extender_for(recorded_nodes()), registry()), options)
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        context.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(
                f"https://127.0.0.1:{serving.port}/filter", json=recorded_args("000-filter-llm-infer-7b-abc12.json")
            ) as response,
        ):
            assert response.status == 200 and (await response.json())["NodeNames"]
    finally:
        await serving.stop()
    assert (tmp_path / "client.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("host", "tls", "client_ca", "exposed"),
    [
        ("127.0.0.1", False, False, False),
        ("localhost", False, False, False),
        ("::1", False, False, False),
        ("", False, False, True),  # every interface
        ("0.0.0.0", True, False, True),  # TLS, but anyone may call
        ("10.0.0.7", True, True, False),  # mutual TLS
        ("", True, True, False),
    ],
)
def test_the_extender_service_refuses_verbs_reachable_by_anyone_however_it_is_built(
    tls_dir: Path, host: str, tls: bool, client_ca: bool, exposed: bool
) -> None:
    """The rule lives in the service, not only in the command line: code that builds an ExtenderConfig meets it."""
    from gpupack.extender.service import check_exposure

    cert = (tls_dir / "tls.crt", tls_dir / "tls.key") if tls else (None, None)
    options = ServeOptions(host, 8888, *cert, client_ca_file=tls_dir / "ca.crt" if client_ca else None)
    if exposed:
        with pytest.raises(ValueError, match="not loopback"):
            check_exposure(options)
    else:
        check_exposure(options)


async def test_a_certificate_that_expires_while_in_use_is_said_once(
    tmp_path: Path, ca: KeyPair, caplog: pytest.LogCaptureFixture
) -> None:
    """Served until then, it is refused by every client afterwards: the service cannot fix that, but says it."""
    # valid for a day and five minutes from `start` (see issue_serving_cert): two more seconds from now
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1, minutes=5, seconds=-2)
    _volume(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=1, valid_from=start), 1)
    with caplog.at_level(logging.ERROR):
        serving = await _serve(tmp_path, CollectorRegistry())
        try:
            await wait_until(lambda: any("expired at" in r.getMessage() for r in caplog.records), timeout=20)
            await asyncio.sleep(0.1)
        finally:
            await serving.stop()
    assert sum("expired at" in r.getMessage() for r in caplog.records) == 1
