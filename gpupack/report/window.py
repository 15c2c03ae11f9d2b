"""The report's windows from the command line: `--window 7d --end TIME`, and `A..B` for before/after.

Durations are Prometheus's (`30m`, `12h`, `7d`, `1w`, combinations like `1d12h`); times are RFC 3339
(`2026-11-30T10:00:00Z`, a date alone meaning its midnight UTC), seconds since the epoch, or `now`.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from gpupack.report.usage import Window

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
MAX_WINDOW_SECONDS = 400 * 86400
"""The longest window read: beyond a year, a report no longer answers "what are the GPUs doing"."""


class WindowError(ValueError):
    """A duration, a time or a range that cannot be read; the message says which and why."""


def duration(text: str) -> float:
    """Seconds of a Prometheus duration (`7d`, `1d12h`). Raises WindowError."""
    if not text or _DURATION.sub("", text) != "":
        raise WindowError(f"{text!r} is not a duration (examples: 30m, 12h, 7d, 1w)")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION.findall(text))
    if not 0 < seconds <= MAX_WINDOW_SECONDS:
        raise WindowError(f"{text!r} must be longer than 0 and at most {MAX_WINDOW_SECONDS // 86400} days")
    return float(seconds)


def instant(text: str, now: float | None = None) -> float:
    """Seconds since the epoch of `now`, a number, or an RFC 3339 time (a zone is required, or a date alone).
    Raises WindowError."""
    if text == "now":
        return time.time() if now is None else now
    try:
        return float(text) if re.fullmatch(r"\d+(\.\d+)?", text) else _parse_time(text)
    except ValueError as exc:
        raise WindowError(f"{text!r} is not a time (examples: now, 2026-11-30T10:00:00Z, 2026-11-30)") from exc


def _parse_time(text: str) -> float:
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("no time zone")
    return parsed.timestamp()


def window(length: str, end: str = "now", now: float | None = None) -> Window:
    """The window of `length` ending at `end`. Raises WindowError."""
    stop = instant(end, now)
    return Window(stop - duration(length), stop)


def span(text: str, now: float | None = None) -> Window:
    """`A..B` (two times) as a window. Raises WindowError."""
    start, sep, stop = text.partition("..")
    if not sep or not start or not stop:
        raise WindowError(f"{text!r} is not a range: write START..END, e.g. 2026-11-01..2026-11-08")
    first, last = instant(start, now), instant(stop, now)
    if last <= first:
        raise WindowError(f"{text!r} ends before it starts")
    if last - first > MAX_WINDOW_SECONDS:
        raise WindowError(f"{text!r} is longer than {MAX_WINDOW_SECONDS // 86400} days")
    return Window(first, last)
