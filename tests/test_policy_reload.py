"""Reloading the policy ConfigMap as admins really break it: emptied, a key given twice, far too large, removed
from the mount, or large enough to take seconds to parse. The version in force changes only for a valid one, and
admissions go on while a reload is parsed."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.policy import MAX_POLICY_BYTES, PolicyError, parse_policy, policy_version
from gpupack.core.policy_store import PolicyStore, load_policy_file, parse_in_child
from gpupack.core.telemetry import PolicyMetrics
from tests.conftest import configmap_volume as _configmap_volume
from tests.conftest import wait_until

AUDIT = b"mode: audit\n"


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[PolicyStore, CollectorRegistry]]:
    """An audit-mode policy mounted like a ConfigMap, watched every 20 ms, with its metrics."""
    registry = CollectorRegistry()
    metrics = PolicyMetrics(registry)
    path = _configmap_volume(tmp_path, AUDIT, 1)
    store = PolicyStore(path, on_reload=metrics.loaded, on_failure=metrics.failed, on_valid=metrics.valid)
    watcher = asyncio.create_task(store.watch(0.02))
    try:
        yield store, registry
    finally:
        watcher.cancel()


def _failures(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gpupack_policy_reload_failures_total")


@pytest.mark.parametrize("empty", [b"", b"  \n\n", b"null\n", b"~", b"# mode: enforce\n# (commented out)\n"])
async def test_a_reload_to_an_empty_document_keeps_the_last_good_version(
    watched: tuple[PolicyStore, CollectorRegistry], tmp_path: Path, caplog: pytest.LogCaptureFixture, empty: bytes
) -> None:
    """An emptied ConfigMap used to switch the cluster from audit to enforce (the defaults) in silence."""
    store, registry = watched
    with caplog.at_level(logging.ERROR):
        _configmap_volume(tmp_path, empty, 2)
        await wait_until(lambda: _failures(registry) == 1)
    assert store.policy.mode == "audit" and store.current.version == policy_version(AUDIT)
    assert any("empty" in r.getMessage() and "{}" in r.getMessage() for r in caplog.records)


async def test_braces_reset_to_the_defaults_explicitly(
    watched: tuple[PolicyStore, CollectorRegistry], tmp_path: Path
) -> None:
    store, _ = watched
    _configmap_volume(tmp_path, b"{}\n", 2)
    await wait_until(lambda: store.policy.mode == "enforce")
    assert store.policy == parse_policy(b"")


def test_an_empty_file_at_start_is_the_default_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"# nothing set yet\n")
    assert load_policy_file(path).policy == parse_policy(b"")


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        (b"mode: audit\nmode: enforce\n", "'mode'"),
        (b"classes:\n  batch: {spot: prefer}\n  batch: {spot: require}\n", "'batch'"),
        (b"extender: {scoring: spread, scoring: binpack}\n", "'scoring'"),
    ],
)
def test_a_key_given_twice_is_an_error_naming_it(doc: bytes, key: str) -> None:
    with pytest.raises(PolicyError, match=f"the key {key} is given twice"):
        parse_policy(doc, "policy.yaml")


def test_a_merge_key_may_still_be_overridden() -> None:
    """`<<: *anchor` then the same key: YAML's merge, not a key given twice."""
    policy = parse_policy(b"classes:\n  inference: &base {cpu: '2', memory: 8Gi}\n  batch: {<<: *base, cpu: '3'}\n")
    assert (policy.classes.batch.cpu, policy.classes.batch.memory) == ("3", "8Gi")


async def test_a_duplicate_key_on_reload_is_refused(
    watched: tuple[PolicyStore, CollectorRegistry], tmp_path: Path
) -> None:
    store, registry = watched
    _configmap_volume(tmp_path, b"mode: audit\nmode: enforce\n", 2)
    await wait_until(lambda: _failures(registry) == 1)
    assert store.policy.mode == "audit"


def test_a_document_larger_than_a_configmap_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(AUDIT + b"#" * MAX_POLICY_BYTES)
    with pytest.raises(PolicyError, match="larger than a ConfigMap can hold"):
        load_policy_file(path)
    with pytest.raises(PolicyError, match="larger than a ConfigMap can hold"):
        parse_policy(path.read_bytes())


@pytest.mark.parametrize(
    ("field", "doc"),
    [
        ("priorityClasses", b"priorityClasses:\n" + b"".join(b"  pc-%d: {value: %d}\n" % (i, i) for i in range(1001))),
        ("ignoredNamespaces", b"ignoredNamespaces: [" + b",".join(b"ns-%d" % i for i in range(1001)) + b"]\n"),
    ],
)
def test_a_list_of_more_than_a_thousand_entries_is_refused_by_name(field: str, doc: bytes) -> None:
    with pytest.raises(PolicyError, match=f"{field}: .*at most 1000"):
        parse_policy(doc)


async def test_the_event_loop_runs_while_a_large_reload_is_parsed(tmp_path: Path) -> None:
    """A 1 MiB policy took seconds of parsing on the event loop; every admission waited. Its parsing now runs in a
    child process: a ticker on the loop keeps ticking through the whole reload."""
    unknown = b"".join(b"  k%06d: {a: 1, b: 2}\n" % i for i in range(30000))
    path = _configmap_volume(tmp_path, AUDIT, 1)
    store = PolicyStore(path)
    _configmap_volume(tmp_path, b"classes:\n" + unknown[: MAX_POLICY_BYTES - 100], 2)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    parsers_seen: set[int] = set()

    async def watcher() -> None:
        while True:
            parsers_seen.update(_policy_parsers())
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    spy = asyncio.create_task(watcher())
    await asyncio.sleep(0.02)
    before = ticks
    assert await store.reload_off_loop() is False  # 30,000 unknown classes: refused, after a long parse
    during = ticks - before
    task.cancel()
    spy.cancel()
    assert during >= 10 and store.policy.mode == "audit"
    assert parsers_seen, "the policy was not parsed in a child process"


def _policy_parsers() -> list[int]:
    """The pids of this process's children that run the policy parser."""
    found = []
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"gpupack.core.policy_child" in cmdline:
                found.append(int(pid))
    return found


async def test_a_cancelled_reload_leaves_no_parser_running(tmp_path: Path) -> None:
    """A shutdown during a reload: the child is killed, not left parsing."""
    unknown = b"".join(b"  k%06d: {a: 1, b: 2}\n" % i for i in range(30000))
    path = _configmap_volume(tmp_path, AUDIT, 1)
    store = PolicyStore(path)
    _configmap_volume(tmp_path, b"classes:\n" + unknown[: MAX_POLICY_BYTES - 100], 2)
    reload = asyncio.create_task(store.reload_off_loop())
    await wait_until(lambda: bool(_policy_parsers()), what="the parser to start")
    reload.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reload
    assert _policy_parsers() == []


async def test_a_parser_that_cannot_run_is_tried_again_at_the_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No verdict on the document (the child could not start): the same valid file is applied once it can."""
    import sys

    path = _configmap_volume(tmp_path, AUDIT, 1)
    store = PolicyStore(path)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    watcher = asyncio.create_task(store.watch(0.02))
    try:
        with caplog.at_level(logging.ERROR):
            _configmap_volume(tmp_path, b"mode: audit\nextender: {scoring: spread}\n", 2)
            await wait_until(lambda: any("trying again" in r.getMessage() for r in caplog.records))
        monkeypatch.undo()
        await wait_until(lambda: store.policy.extender.scoring == "spread", what="the retried reload")
    finally:
        watcher.cancel()


async def test_the_child_parses_exactly_as_the_service_does() -> None:
    doc = b"mode: audit\nclasses: {training: {spot: require}}\nenforce: [priority]\n"
    assert await parse_in_child(doc, "p.yaml") == parse_policy(doc)
    with pytest.raises(PolicyError, match=r"p\.yaml: classes\.batch\.spot"):
        await parse_in_child(b"classes: {batch: {spot: sometimes}}", "p.yaml")
    with pytest.raises(PolicyError, match="empty"):
        await parse_in_child(b"", "p.yaml")


async def test_a_policy_gone_from_the_mount_is_said_once_and_the_policy_stays(
    watched: tuple[PolicyStore, CollectorRegistry], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Removing the key from the ConfigMap leaves `policy.yaml` a dangling symlink; it went unnoticed."""
    store, registry = watched
    with caplog.at_level(logging.ERROR):
        (tmp_path / "..2026_1" / "policy.yaml").unlink()
        await wait_until(lambda: _failures(registry) == 1)
        await asyncio.sleep(0.1)  # more polls: said once
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(said) == 1 and "dangling symlink" in said[0] and store.policy.mode == "audit"
    _configmap_volume(tmp_path, b"mode: audit\nextender: {scoring: spread}\n", 2)
    await wait_until(lambda: store.policy.extender.scoring == "spread")


@pytest.mark.parametrize("swap", ["fifo", "device", "huge"])
async def test_a_file_that_is_no_configmap_key_is_refused_without_reading_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, swap: str
) -> None:
    """A FIFO hung the webhook for good (the read waited for a writer, on the event loop), /dev/zero grew it to
    gigabytes, a 200 MB file was hashed on the loop at every poll. Each is refused, and the loop goes on."""
    path = tmp_path / "policy.yaml"
    path.write_bytes(AUDIT)
    registry = CollectorRegistry()
    metrics = PolicyMetrics(registry)
    store = PolicyStore(path, on_reload=metrics.loaded, on_failure=metrics.failed, on_valid=metrics.valid)
    path.unlink()
    if swap == "fifo":
        os.mkfifo(path)
    elif swap == "device":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as huge:
            huge.truncate(200 * 1024 * 1024)  # sparse: no 200 MB written to the test's disk
    watcher = asyncio.create_task(store.watch(0.02))
    try:
        with caplog.at_level(logging.ERROR):
            await wait_until(lambda: _failures(registry) == 1)
            await asyncio.sleep(0.1)  # more polls, on a loop that still turns
        assert _failures(registry) == 1 and store.policy.mode == "audit"
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "not a regular file" in said or "larger than a ConfigMap" in said
    finally:
        watcher.cancel()


async def test_the_file_valid_gauge_stays_0_until_the_file_is_fixed(
    watched: tuple[PolicyStore, CollectorRegistry], tmp_path: Path
) -> None:
    """A refused version counts once, but the file stays invalid (a restarted pod would not start) until fixed,
    even when it is fixed back to the version in force."""
    store, registry = watched

    def valid() -> float | None:
        return registry.get_sample_value("gpupack_policy_file_valid")

    assert valid() == 1
    _configmap_volume(tmp_path, b"mode: nonsense\n", 2)
    await wait_until(lambda: _failures(registry) == 1 and valid() == 0)
    await asyncio.sleep(0.1)  # more polls of the same bad file: still one failure, still invalid
    assert _failures(registry) == 1 and valid() == 0
    _configmap_volume(tmp_path, AUDIT, 3)  # back to the version in force
    await wait_until(lambda: valid() == 1)
    assert store.current.version == policy_version(AUDIT) and _failures(registry) == 1
