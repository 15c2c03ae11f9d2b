"""Change detection for mounted files by content digest.

ConfigMap and Secret volumes change by swapping a `..data` symlink, and no event reaches the process: polling
the digest of the files' bytes is the reliable signal (kopf does the same for certificates).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

RETRY: Final = "retry"
"""What `on_change` returns when it could not act on the change yet: the same content counts as new next time."""


MAX_FILE_BYTES = 1024 * 1024
"""The largest mounted file read: a ConfigMap or Secret holds at most 1 MiB."""


class NotAFile(OSError):
    """A mounted path that is not a regular file of at most MAX_FILE_BYTES (a FIFO, a device, a huge file)."""


def read_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes.

    A mounted ConfigMap or Secret key is a small regular file; anything else swapped in is refused before it is
    read: a FIFO would block the reader for good (opened without blocking, then refused), `/dev/zero` would grow
    without end, a 200 MB file took 240 ms of the event loop to hash at every poll. Raises NotAFile, or OSError.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise NotAFile(f"{path} is not a regular file")
        if status.st_size > limit:
            raise NotAFile(f"{path} is {status.st_size} bytes: larger than a ConfigMap can hold ({limit})")
        return file.read(limit + 1)


def unreadable(paths: Sequence[Path]) -> str | None:
    """Why one of `paths` cannot be read right now (None when all can): a mounted key removed from its
    ConfigMap or Secret leaves a dangling symlink, which must be said, not skipped."""
    for path in paths:
        try:
            read_file(path)
        except FileNotFoundError:
            if path.is_symlink():
                return f"{path} is a dangling symlink (to {path.readlink()}): its key is gone from the mount"
            return f"{path} does not exist"
        except NotAFile as exc:
            return str(exc)
        except OSError as exc:
            return f"{path} cannot be read: {exc.strerror or exc}"
    return None


def files_digest(paths: Sequence[Path]) -> str | None:
    """SHA-256 over the bytes of `paths` in order (each read with `read_file`); None when one of them cannot be
    read right now."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            digest.update(read_file(path))
            digest.update(b"\0")
    except OSError:
        return None
    return digest.hexdigest()


async def poll_changes(
    paths: Sequence[Path],
    interval: float,
    on_change: Callable[[], object],
    initial: str | None,
    on_unreadable: Callable[[str], None] | None = None,
) -> None:
    """Call `on_change` whenever the digest of `paths` differs from the last one seen; runs until cancelled.

    A file that cannot be read is reported once to `on_unreadable` with the reason (a dangling symlink, a
    missing file), not at every poll, and the digest seen stays the last readable one, so the same content
    coming back is no change. `on_change` handles its own failures; an exception from it is logged and polling
    goes on; when it returns RETRY, the change is offered again at the next poll.
    """
    last = initial
    missing = False
    while True:
        await asyncio.sleep(interval)
        current = files_digest(paths)
        if current is None:
            reason = unreadable(paths)
            if reason is not None and not missing and on_unreadable is not None:
                on_unreadable(reason)
            missing = reason is not None
            continue
        missing = False
        if current == last:
            continue
        last = current
        try:
            result = on_change()
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            log.exception("reload failed", extra={"paths": [str(p) for p in paths]})
            continue
        if result == RETRY:
            last = None
