"""Loopback helpers shared by the benchmarks (and the tests): a free port, waiting until a server accepts
connections, and a kubeconfig for a fake API server."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
