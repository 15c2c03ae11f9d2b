"""Kubernetes resource quantities (`500m`, `8Gi`, `1e3`) parsed to exact decimals and compared.

Only the serialisation rules of `k8s.io/apimachinery/pkg/api/resource` matter here: a signed decimal number
followed by a binary suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or an exponent.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")

GIB = Decimal(2**30)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity into its exact value in base units (bytes, cores, ...).

    Raises QuantityError for anything the API server would reject, so callers can name the offending field.
    """
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (examples: 500m, 2, 8Gi, 16G)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{text!r} is not a quantity") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    return value * Decimal(10) ** int(suffix[1:])


def format_gib(value: Decimal) -> str:
    """Render a byte count for people: `8Gi`, `9.5Gi`."""
    gib = (value / GIB).normalize()
    return f"{gib:f}Gi"
