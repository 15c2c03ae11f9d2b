"""Malformed HTTP requests in the log: one line at WARNING, at most one every few seconds, never a traceback.

aiohttp answers a request it cannot parse (a bad Content-Length, a bare LF, a NUL byte, an oversized header)
with 400 by itself, then logs the parser's exception with its full traceback at ERROR. A client that sends
garbage in a loop would fill the log with tracebacks that say nothing about gpupack; a genuine error in a
handler still logs its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from gpupack.core.logs import RateLimit

INTERVAL_SECONDS = 10.0
"""Least time between two log lines about malformed requests; the ones in between are counted in the next."""


class ProtocolLog(logging.LoggerAdapter[logging.Logger]):
    """The logger aiohttp's request handlers are given: client mistakes become one rate-limited WARNING line,
    everything else passes through unchanged. `on_malformed` counts every malformed request (a metric)."""

    def __init__(self, logger: logging.Logger, on_malformed: Callable[[], None] | None = None) -> None:
        super().__init__(logger, {})
        self._limit = RateLimit(INTERVAL_SECONDS)
        self._on_malformed = on_malformed

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, RequestPayloadError):
            # A body that did not decode: the handler already answered 400 and counted it; aiohttp then trips
            # over the same error draining the unread rest of the body ("Unhandled exception").
            self.logger.debug("%s: %s", str(msg) % args, exc_info)
            return
        if not isinstance(exc_info, HttpProcessingError):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)
            return
        if self._on_malformed is not None:
            self._on_malformed()
        held = self._limit.allow()
        if held is None:
            return
        more = f" ({held} more since the last line)" if held else ""
        reason = str(exc_info).replace("\n", " ")[:300]
        self.logger.warning("%s: %s: %s%s", str(msg) % args, type(exc_info).__name__, reason, more)
