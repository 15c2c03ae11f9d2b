"""Reading wrk's report (`wrk --latency`), shared by the benchmarks."""

from __future__ import annotations

import re

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def duration_ms(text: str) -> float:
    """A wrk duration (`812.00us`, `1.20ms`, `1.01s`, `1.50m`) in milliseconds; ValueError otherwise."""
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if found is None:
        raise ValueError(f"unexpected duration in wrk's output: {text!r}")
    value, unit = found.groups()
    return float(value) * _UNITS[unit]


def _first(pattern: str, out: str) -> str:
    found = re.search(pattern, out, re.M)
    if found is None:
        raise ValueError(f"wrk's output has no match for {pattern!r}")
    return found.group(1)


def read_report(out: str) -> dict[str, float]:
    """Requests/s, requests, p50/p90/p99 and max latency (ms), non-2xx answers and socket errors.

    Percentiles are read from the latency distribution only, anchored at the line start: the thread summary's
    "+/- Stdev" column (e.g. `90.50%`) also contains "50%". Raises ValueError naming what is missing.
    """
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": float(_first(r"Requests/sec:\s+([\d.]+)", out)),
        "requests": float(_first(r"(\d+) requests in", out)),
        "p50_ms": duration_ms(_first(r"^\s*50%\s+(\S+)", out)),
        "p90_ms": duration_ms(_first(r"^\s*90%\s+(\S+)", out)),
        "p99_ms": duration_ms(_first(r"^\s*99%\s+(\S+)", out)),
        "max_ms": duration_ms(_first(r"Latency\s+\S+\s+\S+\s+(\S+)", out)),
        "non_2xx": float(non_2xx.group(1)) if non_2xx else 0.0,
        "socket_errors": float(sum(int(g) for g in socket_errors.groups())) if socket_errors else 0.0,
    }
