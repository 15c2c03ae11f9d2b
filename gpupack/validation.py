"""Turn pydantic validation errors into the one-line `field.path: problem` messages every error here uses."""

from __future__ import annotations

from pydantic import ValidationError


def describe(exc: ValidationError, prefix: str = "", limit: int = 1, whole: str = "(document)") -> str:
    """`prefix` + the dotted location and message of the first `limit` errors, joined by `; `.

    `whole` names the location when the error is about the input as a whole (an empty location).
    """
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{prefix}{where or whole}: {err['msg']}")
    return "; ".join(parts)
