"""Kubernetes resource quantities (`500m`, `8Gi`, `1e3`) parsed to exact decimals and compared.

Only the serialisation rules of `k8s.io/apimachinery/pkg/api/resource` matter here: a signed decimal number
followed by a binary suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or an exponent.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Context, Decimal, DecimalException, InvalidOperation

from gpupack.core.validation import quoted

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
# Possessive digit runs (`++`): a long run of digits followed by a character that fits nowhere fails at once,
# instead of giving the digits back one by one (230 ms for a 3 MB label value of digits and an `x`).
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]++)?$")

GIB = Decimal(2**30)
NANO = Decimal("1e-9")
MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity accepted, in base units (Kubernetes keeps quantities in int64 where it can)."""
_MAX_DIGITS = 19
"""Digits of `MAX_QUANTITY`: a value whose leading digit sits higher is too large without computing it."""
_BINARY_DIGITS = {suffix: Decimal(factor).adjusted() for suffix, factor in _BINARY.items()}
"""The power of ten of each binary suffix's leading digit (Ki: 3), to bound a value before multiplying."""
_EXACT = Context(prec=80, Emax=999, Emin=-999)
"""Wide enough for any accepted value times any suffix (the bounds checked first keep it in range)."""


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity into its exact value in base units (bytes, cores, ...).

    Raises QuantityError for anything the API server would reject, so callers can name the offending field, and
    for magnitudes of 2^63 base units or more: no resource is that large, and a value like `1e999999` would
    otherwise become a million-digit integer downstream (seconds of CPU per conversion). Like Kubernetes, a value
    finer than the nano unit is rounded up to it.
    """
    if isinstance(text, bool):
        raise QuantityError(f"{quoted(text)} is not a quantity")
    if isinstance(text, int | float):
        number, suffix = str(text), ""
    else:
        match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise QuantityError(f"{quoted(text)} is not a quantity (examples: 500m, 2, 8Gi, 16G)")
        number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"{quoted(text)} is not a quantity") from exc
    if not value.is_finite():
        raise QuantityError(f"{quoted(text)} is not a finite quantity")
    if not value:
        return Decimal(0)  # "0e1000000" is zero: no exponent arithmetic
    factor = _BINARY.get(suffix)
    if factor is not None:
        magnitude: int | Decimal = _BINARY_DIGITS[suffix]
    else:  # a decimal suffix or an exponent: a power of ten, applied exactly by `scaleb`
        # Decimal, not int: an exponent may have any number of digits (leading zeros too) and int() stops at 4,300
        magnitude = _DECIMAL[suffix].adjusted() if suffix in _DECIMAL else Decimal(suffix[1:])
    leading = value.adjusted() + magnitude  # the power of ten of the leading digit, before any arithmetic
    if leading > _MAX_DIGITS:
        raise QuantityError(f"{quoted(text)} is too large (at most {MAX_QUANTITY} base units)")
    if leading < -10:
        return NANO.copy_sign(value)  # far finer than 1n, which it rounds up to
    try:
        value = _EXACT.multiply(value, factor) if factor is not None else value.scaleb(magnitude, _EXACT)
        if value.as_tuple().exponent < -9:  # type: ignore[operator]  # finite: an int
            value = value.quantize(NANO, rounding=ROUND_UP, context=_EXACT)
    except DecimalException as exc:  # pragma: no cover - the bounds above keep every value in range
        raise QuantityError(f"{quoted(text)} is not a quantity gpupack can compute with") from exc
    if abs(value) > MAX_QUANTITY:
        raise QuantityError(f"{quoted(text)} is too large (at most {MAX_QUANTITY} base units)")
    return value


def format_gib(value: Decimal) -> str:
    """Render a byte count for people: `8Gi`, `9.5Gi`."""
    gib = (value / GIB).normalize()
    return f"{gib:f}Gi"
