"""Logging: one line per event, `key=value` pairs for the fields passed in `extra` (pod, uid, node...)."""

from __future__ import annotations

import logging

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
