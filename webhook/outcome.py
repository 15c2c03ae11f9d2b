"""What planning one pod produced: the changes to make, the conflicts seen, and how to say them to people.

Every change and every conflict becomes one warning (kubectl prints them; the API server caps none, but long
lines are unreadable, so each is cut to 120 characters) and one line of the audit annotation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from gpupack.core.lease import SchedulerStatus

ChangeKind = Literal["gpu", "requests", "spot", "priority", "autoscaler", "scheduler", "conflict", "advice"]

WARNING_LIMIT = 120


def clip(text: str, limit: int = WARNING_LIMIT) -> str:
    """Cut `text` to `limit` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Note(NamedTuple):
    """One change or conflict, in words, with the kind the metrics count it under."""

    kind: ChangeKind
    text: str


@dataclass(slots=True)
class Notes:
    """The notes of one admission, in the order they were made."""

    items: list[Note] = field(default_factory=list)
    unrouted: SchedulerStatus | None = None
    """Set when the policy's scheduler has no live leader and the pod stays on (or goes to) the default scheduler:
    the verdict that kept it there, for the metric and the log line."""

    def add(self, kind: ChangeKind, text: str) -> None:
        """Record a change or a conflict."""
        self.items.append(Note(kind, text))

    def kinds(self) -> list[ChangeKind]:
        """The distinct kinds of the changes (conflicts and advice excluded), for the mutation counter.

        Distinct, so the counter counts pods changed per kind: a GPU request and the toleration it brings, or a
        spot term per recognised label, are one pod's GPU or spot change, not two.
        """
        return list(dict.fromkeys(n.kind for n in self.items if n.kind not in ("conflict", "advice")))

    def warnings(self, prefix: str) -> list[str]:
        """One warning per note, prefixed (`gpupack:` or `gpupack audit, would:`) and clipped."""
        return [clip(f"{prefix} {text}") for _, text in self.items]

    def summary(self) -> str:
        """All notes on one line, for annotations and logs."""
        return "; ".join([text for _, text in self.items])
