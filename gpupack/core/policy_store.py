"""The policy in force: loaded from the mounted ConfigMap file and replaced only by a version that validates.

A bad edit of the ConfigMap must never take admission down or silently change behaviour: the store logs the
field and the problem, counts the failure, and keeps serving the last good version. That covers a document that
does not validate, one larger than a ConfigMap holds, a reload to an empty document (`{}` resets to the defaults
explicitly), and a key that vanished from the mount (a dangling symlink). A reload is parsed in a child
process (`gpupack.core.policy_child`), so the event loop keeps answering admissions while a large policy is parsed.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpupack.core.policy import MAX_POLICY_BYTES, Policy, PolicyError, parse_policy, policy_version
from gpupack.core.watch import RETRY, NotAFile, poll_changes, read_file

log = logging.getLogger(__name__)


CHILD_TIMEOUT_SECONDS = 60.0
"""How long a child may take to parse a policy (about a second per MiB) before it is killed."""


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A validated policy and the digest of the bytes it came from."""

    policy: Policy
    version: str


def _read(path: Path) -> bytes:
    """The file's bytes, refusing one over MAX_POLICY_BYTES (or not a regular file) without reading it all."""
    try:
        return read_file(path, MAX_POLICY_BYTES)
    except NotAFile as exc:
        raise PolicyError(str(exc)) from exc


class ParserFailed(PolicyError):
    """The child process that parses a policy could not run or died: no verdict on the document, so the reload
    is tried again at the next poll."""


async def parse_in_child(raw: bytes, source: str, timeout: float = CHILD_TIMEOUT_SECONDS) -> Policy:
    """`parse_policy(raw, source, empty_is_default=False)` in a child process. Raises PolicyError for an invalid
    document (one too slow or too large to parse included), and ParserFailed when the child cannot start, dies or
    answers garbage. The child never outlives the call, cancelled or not."""
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",  # isolated: neither the environment nor the working directory changes what it imports
            "-m",
            "gpupack.core.policy_child",
            source,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise ParserFailed(f"{source}: cannot start the policy parser: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(child.communicate(raw), timeout)
    except TimeoutError as exc:
        raise PolicyError(f"{source}: parsing took longer than {timeout:g}s") from exc
    finally:
        if child.returncode is None:  # timed out, or the reload was cancelled (shutdown): never leave it running
            child.kill()
            await child.wait()
    try:
        status, value = pickle.loads(out)
    except Exception as exc:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
        raise ParserFailed(f"{source}: the policy parser failed: {tail[0][:300]}") from exc
    if status != "ok" or not isinstance(value, Policy):
        raise PolicyError(str(value))
    return value


def load_policy_file(path: Path | None, empty_is_default: bool = True) -> LoadedPolicy:
    """Read and validate a policy file; no path means the built-in defaults. `empty_is_default`: see
    `parse_policy` (True at start-up, False on a reload).

    Raises PolicyError (naming the file, field and problem) or OSError when the file cannot be read.
    """
    raw = _read(path) if path is not None else b""
    return LoadedPolicy(parse_policy(raw, str(path or "built-in defaults"), empty_is_default), policy_version(raw))


class PolicyStore:
    """Holds the policy in force; `reload()` swaps it only for a valid new version."""

    def __init__(
        self,
        path: Path | None,
        initial: LoadedPolicy | None = None,
        on_reload: Callable[[LoadedPolicy], None] | None = None,
        on_failure: Callable[[str], None] | None = None,
        on_valid: Callable[[], None] | None = None,
    ) -> None:
        """`on_reload`: a new version took effect (and once for the initial one); `on_failure`: a version was
        refused; `on_valid`: the file read validated, new version or the one in force (a refused edit reverted)."""
        self.path = path
        self.current = initial if initial is not None else load_policy_file(path)
        self._on_reload = on_reload
        self._on_failure = on_failure
        self._on_valid = on_valid
        if on_reload is not None:
            on_reload(self.current)

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        return self.current.policy

    def _refused(self, problem: str) -> None:
        log.error("policy reload refused, keeping version %s: %s", self.current.version, problem)
        if self._on_failure is not None:
            self._on_failure(problem)

    def _load(self) -> LoadedPolicy | str:
        """The file's new version, parsed in this process, or the problem with it."""
        assert self.path is not None
        try:
            return load_policy_file(self.path, empty_is_default=False)
        except (PolicyError, OSError) as exc:
            return str(exc)

    def _apply(self, loaded: LoadedPolicy | str) -> bool:
        if isinstance(loaded, str):
            self._refused(loaded)
            return False
        if self._on_valid is not None:
            self._on_valid()
        if loaded.version == self.current.version:
            return False
        log.info("policy reloaded: version %s replaces %s", loaded.version, self.current.version)
        self.current = loaded
        if self._on_reload is not None:
            self._on_reload(loaded)
        return True

    def reload(self) -> bool:
        """Re-read the file and parse it in this process; True when a new valid version took effect. The same
        rules as `reload_off_loop` (what the services' watch uses), for callers with no event loop to protect."""
        if self.path is None:
            return False
        return self._apply(self._load())

    async def reload_off_loop(self) -> bool | str:
        """`reload()` with the parsing in a child process, so the event loop is not held while a large policy
        is parsed. The swap itself happens on the loop: a request sees one version or the other, never a mix.
        Returns True when a new version took effect, and `watch.RETRY` when the parser itself failed (its child
        could not run or died), so that the same content is tried again at the next poll."""
        if self.path is None:
            return False
        try:
            raw = await asyncio.to_thread(_read, self.path)
            version = policy_version(raw)
            if version == self.current.version:  # the version in force (a refused edit reverted): no parse
                return self._apply(self.current)
            loaded: LoadedPolicy | str = LoadedPolicy(await parse_in_child(raw, str(self.path)), version)
        except ParserFailed as exc:
            self._refused(f"{exc} (trying again at the next poll)")
            return RETRY
        except (PolicyError, OSError) as exc:
            loaded = str(exc)
        return self._apply(loaded)

    async def watch(self, interval: float) -> None:
        """Poll the file until cancelled (ConfigMap volumes update by symlink swap, without events).

        The first poll always re-reads: the file may have changed between loading and watching, and a version
        equal to the one in force changes nothing. A file that cannot be read (its key removed from the
        ConfigMap leaves a dangling symlink) is refused once, until it can be read again.
        """
        if self.path is None:
            return
        await poll_changes([self.path], interval, self.reload_off_loop, initial=None, on_unreadable=self._refused)
