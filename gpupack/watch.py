"""Change detection for mounted files by content digest.

ConfigMap and Secret volumes change by swapping a `..data` symlink, and no event reaches the process: polling
the digest of the files' bytes is the reliable signal (kopf does the same for certificates).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def files_digest(paths: Sequence[Path]) -> str | None:
    """SHA-256 over the bytes of `paths` in order; None when one of them cannot be read right now."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            digest.update(path.read_bytes())
            digest.update(b"\0")
    except OSError:
        return None
    return digest.hexdigest()


async def poll_changes(
    paths: Sequence[Path], interval: float, on_change: Callable[[], object], initial: str | None
) -> None:
    """Call `on_change` whenever the digest of `paths` differs from the last one seen; runs until cancelled.

    A digest that cannot be computed (a file missing mid-swap) is skipped, not reported: the next poll sees the
    settled state. `on_change` handles its own failures; an exception from it is logged and polling goes on.
    """
    last = initial
    while True:
        await asyncio.sleep(interval)
        current = files_digest(paths)
        if current is None or current == last:
            continue
        last = current
        try:
            result = on_change()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("reload failed", extra={"paths": [str(p) for p in paths]})
