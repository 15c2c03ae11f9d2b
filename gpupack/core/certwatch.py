"""The serving certificate in force: reloaded when its files change, only when the new one is valid, and its
expiry exported so an alert can fire two weeks ahead.

Mounted Secrets change without an event (a `..data` symlink swap), so the files' digest is polled. A new pair
that does not load (half written, mismatched), lies outside its validity period (expired, or not valid yet:
retried at every poll, since time alone can make it valid), or has vanished from the mount (a dangling
symlink) leaves the current certificate in use, with one log line and one count per distinct problem.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from gpupack.certs.tls import CertificateProblem, reload_chain
from gpupack.core.watch import files_digest, unreadable

log = logging.getLogger(__name__)


class CertificateReloader:
    """Keeps a live server context on the newest valid certificate of two mounted files."""

    def __init__(
        self,
        context: ssl.SSLContext,
        cert_file: Path,
        key_file: Path,
        expires: datetime.datetime,
        on_loaded: Callable[[datetime.datetime], None] | None = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._context = context
        self._files = (cert_file, key_file)
        self._applied = files_digest(self._files)
        self._problem: str | None = None
        self._expired_said: datetime.datetime | None = None
        self.expires = expires
        """When the certificate in use expires."""
        self._on_loaded = on_loaded
        self._on_failure = on_failure
        if on_loaded is not None:
            on_loaded(expires)

    def _failed(self, problem: str) -> None:
        if problem == self._problem:  # the same problem as at the last poll: said once already
            return
        self._problem = problem
        log.warning("serving certificate not reloaded, keeping the current one: %s", problem)
        if self._on_failure is not None:
            self._on_failure(problem)

    def poll(self) -> bool:
        """Check the files once; True when a new certificate took effect."""
        self._say_if_expired()
        digest = files_digest(self._files)
        if digest is None:
            self._failed(unreadable(self._files) or "the certificate files changed while being read")
            return False
        if digest == self._applied:
            if self._problem is not None:
                log.info("serving certificate files are back as they were; the current certificate stays")
                self._problem = None
            return False
        try:
            expires = reload_chain(self._context, *self._files)
        except (OSError, ssl.SSLError, CertificateProblem) as exc:
            self._failed(str(exc))
            return False
        self._applied, self._problem, self.expires = digest, None, expires
        log.info("serving certificate reloaded from %s, valid until %s", self._files[0], f"{expires:%Y-%m-%d}")
        if self._on_loaded is not None:
            self._on_loaded(expires)
        return True

    def _say_if_expired(self) -> None:
        """The certificate in use has expired (no valid one replaced it in time): clients refuse every handshake.
        Said once per certificate, as an ERROR: nothing the service does can fix it, the Secret must be renewed."""
        if self._expired_said == self.expires or datetime.datetime.now(datetime.UTC) <= self.expires:
            return
        self._expired_said = self.expires
        log.error(
            "the serving certificate %s expired at %s: every client refuses it until the Secret holds a valid one",
            self._files[0],
            f"{self.expires:%Y-%m-%dT%H:%M:%SZ}",
        )

    async def run(self, interval: float) -> None:
        """Poll every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.poll()
