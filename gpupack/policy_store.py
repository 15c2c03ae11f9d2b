"""The policy in force: loaded from the mounted ConfigMap file and replaced only by a version that validates.

A bad edit of the ConfigMap must never take admission down or silently change behaviour: the store logs the
field and the problem, counts the failure, and keeps serving the last good version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpupack.policy import Policy, PolicyError, parse_policy, policy_version
from gpupack.watch import poll_changes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A validated policy and the digest of the bytes it came from."""

    policy: Policy
    version: str


def load_policy_file(path: Path | None) -> LoadedPolicy:
    """Read and validate a policy file; no path means the built-in defaults.

    Raises PolicyError (naming the file, field and problem) or OSError when the file cannot be read.
    """
    raw = path.read_bytes() if path is not None else b""
    return LoadedPolicy(parse_policy(raw, str(path or "built-in defaults")), policy_version(raw))


class PolicyStore:
    """Holds the policy in force; `reload()` swaps it only for a valid new version."""

    def __init__(
        self,
        path: Path | None,
        initial: LoadedPolicy | None = None,
        on_reload: Callable[[LoadedPolicy], None] | None = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.current = initial if initial is not None else load_policy_file(path)
        self._on_reload = on_reload
        self._on_failure = on_failure
        if on_reload is not None:
            on_reload(self.current)

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        return self.current.policy

    def reload(self) -> bool:
        """Re-read the file; returns True when a new valid version took effect."""
        if self.path is None:
            return False
        try:
            loaded = load_policy_file(self.path)
        except (PolicyError, OSError) as exc:
            log.error("policy reload refused, keeping version %s: %s", self.current.version, exc)
            if self._on_failure is not None:
                self._on_failure(str(exc))
            return False
        if loaded.version == self.current.version:
            return False
        log.info("policy reloaded: version %s replaces %s", loaded.version, self.current.version)
        self.current = loaded
        if self._on_reload is not None:
            self._on_reload(loaded)
        return True

    async def watch(self, interval: float) -> None:
        """Poll the file until cancelled (ConfigMap volumes update by symlink swap, without events).

        The first poll always re-reads: the file may have changed between loading and watching, and `reload()`
        ignores a version equal to the one in force.
        """
        if self.path is None:
            return
        await poll_changes([self.path], interval, self.reload, initial=None)
