"""Turn pydantic and msgspec validation errors into the one-line `field.path: problem` messages every error here
uses."""

from __future__ import annotations

import re

import msgspec
from pydantic import ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

DOCUMENT_CONFIG = ConfigDict(
    alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False
)
"""How the YAML documents admins and users write are read (the policy ConfigMap, simulator scenarios): camelCase
keys like Kubernetes objects, unknown fields refused (a typo is an error naming the field, not an ignored
setting), immutable once read, and no NaN or infinity (`.inf` is valid YAML and passes `ge=0`; a weight of `.inf`
made every MIG score NaN)."""


def describe(exc: ValidationError, prefix: str = "", limit: int = 1, whole: str = "(document)") -> str:
    """`prefix` + the dotted location and message of the first `limit` errors, joined by `; `.

    `whole` names the location when the error is about the input as a whole (an empty location).
    """
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{prefix}{where or whole}: {err['msg']}")
    return "; ".join(parts)


_MISSING = re.compile(r"Object missing required field `(.*)`")


def describe_msgspec(exc: msgspec.ValidationError, prefix: str = "", whole: str = "(document)") -> str:
    """`prefix` + the dotted location and message of a msgspec error, in the form `describe` gives pydantic's:
    msgspec's "Object missing required field `uid` - at `$.request`" becomes `request.uid: Field required`,
    "Expected `str`, got `int` - at `$.spec.containers[0].name"` becomes `spec.containers[0].name: Expected
    `str`, got `int``. `whole` names the location when the error is about the input as a whole."""
    message, at, where = str(exc).rpartition(" - at `")
    if not at:
        message, where = where, "$`"
    path = where.removesuffix("`").removeprefix("$").removeprefix(".")
    missing = _MISSING.fullmatch(message)
    if missing is not None:
        path, message = f"{path}.{missing.group(1)}" if path else missing.group(1), "Field required"
    return f"{prefix}{path or whole}: {message}"


def quoted(value: object, limit: int = 64) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters with `…`. A label value or a
    Lease field sent by a hostile client can be megabytes, and messages end up in logs, warnings and events."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
