"""argparse types shared by the `gpupack` command and the benchmarks: a count, a rate or a name that cannot be
right is refused by argparse with the flag named, instead of dividing by zero, waiting forever or being carried
into a certificate later."""

from __future__ import annotations

import argparse
import math
import re

_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$", re.IGNORECASE
)


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """A finite number greater than zero (`nan` and `inf` parse as floats, and pass a plain `> 0` test)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a number greater than zero")
    return value


def dns_name(text: str) -> str:
    """A DNS name a certificate can carry (RFC 1123 labels, optionally one leading wildcard label)."""
    if len(text) > 253 or not _DNS_NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a DNS name")
    return text


def port(text: str) -> int:
    """A TCP port to listen on, 1-65535."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from exc
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port number (1-65535)")
    return value
