"""Logging: one line per event, `key=value` pairs for the fields passed in `extra` (pod, uid, node...), and a rate
limit for lines a client can trigger at will."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    """`2026-11-29T21:30:00 INFO webhook.app admission failed uid=... pod=ns/name`."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        return f"{line} {extras}" if extras else line


def setup(level: str = "INFO") -> None:
    """Log to stderr at `level`."""
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class RateLimit:
    """Allows one event per `interval` seconds and counts the ones it holds back."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = float("-inf")
        self.held_back = 0

    def allow(self) -> int | None:
        """None when this event is held back; else how many were held back since the last one allowed."""
        now = self._clock()
        if now < self._next:
            self.held_back += 1
            return None
        self._next = now + self.interval
        held, self.held_back = self.held_back, 0
        return held
