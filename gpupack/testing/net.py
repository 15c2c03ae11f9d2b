"""Loopback helpers shared by the benchmarks (and the tests): a free port, waiting until a server accepts
connections, and a kubeconfig for a fake API server."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import time
from pathlib import Path

PORT_BASE = 20_000
"""The first port handed out: below Linux's ephemeral range (32768-60999), so no outgoing connection's local port
takes a port a test server is about to bind."""
PORT_BLOCK = 2_000
PORT_BLOCKS = 6
"""Ports 20000-31999 in blocks of 2,000, one per test worker (pytest-xdist's `gw0`, `gw1`...): two workers never
hand out the same port, so one cannot bind a port another just found free (seen as `address already in use`)."""


def _block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return int(worker[2:]) % PORT_BLOCKS
    return PORT_BLOCKS - 1 - os.getpid() % 2  # a plain run (a benchmark, one test): the last blocks


_cursor = itertools.count(random.randrange(PORT_BLOCK))
"""Where this process goes on in its block: ports are not reused while others are left (a closed server's port may
sit in TIME_WAIT)."""


def free_port() -> int:
    """A TCP port nothing listens on right now, from this process's block (`PORT_BLOCKS`), free on every IPv4
    address (servers here listen on loopback or on every interface)."""
    first = PORT_BASE + _block() * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = first + next(_cursor) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # a probe, closed at once
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free TCP port in {first}-{first + PORT_BLOCK - 1}")


def wait_port(port: int, timeout: float = 120.0) -> None:
    """Until something accepts connections on `port`; RuntimeError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout:g}s")


def write_kubeconfig(path: Path, port: int) -> Path:
    """A kubeconfig for `http://127.0.0.1:<port>` with a bearer token."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path
