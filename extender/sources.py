"""Where live DCGM data comes from: Prometheus (production) or a DCGM exporter text snapshot (demo, tests).

Both are read in the background by `LiveMetricsCache`; a verb never waits on them. Reads are blocking and
run in a thread. A failed read keeps the last snapshot, whose samples then age out one by one: scheduling
goes on with neutral scores rather than stopping when Prometheus is down.

Prometheus answers `avg_over_time(...)` with the evaluation time, not the sample's, so the age of each
series comes from a second query, `timestamp(<signal>)`, which returns the time of its newest raw sample
(and nothing once Prometheus has marked the series stale because its target is down).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE, SIGNALS
from gpupack.core.policy import MetricsPolicy
from gpupack.extender.live import EMPTY, LiveMetrics, Series, aggregate

log = logging.getLogger(__name__)


class MetricsSource(Protocol):
    """Reads every DCGM series once; blocking; raises on any failure; None when nothing changed since the
    last read (the snapshot in force stays, its samples ageing as before) unless `again` asks for the series
    anyway (what they mean changed: a GPU UUID now names a DRA node)."""

    def read(self, policy: MetricsPolicy, again: bool = False) -> list[Series] | None: ...


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_exposition(text: str, default_at: float) -> list[Series]:
    """The DCGM signals of a Prometheus text exposition (other families are skipped unparsed).

    A line regex instead of prometheus_client's parser: a 5,000-node snapshot has 100,000 series, and the
    generic parser holds the GIL for seconds, which the verbs on the same core would wait for.
    Raises ValueError naming the line that does not parse.
    """
    out: list[Series] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith(SIGNALS):
            continue
        match = _SAMPLE.match(line)
        if match is None or (match.group(2) is not None and not _LABEL.search(match.group(2))):
            raise ValueError(f"line {number} is not a Prometheus text sample: {line[:120]!r}")
        name, labels, value, stamp = match.groups()
        if name not in SIGNALS:
            continue
        pairs = _LABEL.findall(labels or "")
        parsed = {k: _unescape(v) if "\\" in v else v for k, v in pairs}
        try:
            out.append(Series(name, parsed, float(value), int(stamp) / 1000 if stamp else default_at))
        except ValueError as exc:
            raise ValueError(f"line {number}: {value!r} is not a number") from exc
    return out


class StaticSource:
    """A DCGM exporter `/metrics` text file. Samples without a timestamp are as old as the file's last write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None

    def read(self, policy: MetricsPolicy, again: bool = False) -> list[Series] | None:
        """Parse the file, or None when it has not changed since the last read and `again` is not asked for
        (parsing 100,000 series costs seconds of the core the verbs run on). Raises OSError or ValueError when it
        is missing or not exposition text."""
        stat = self.path.stat()
        seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if seen == self._seen and not again:
            return None
        series = parse_exposition(self.path.read_text(), stat.st_mtime)
        self._seen = seen
        return series


def _series_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


class PrometheusSource:
    """Prometheus's HTTP API through prometheus-api-client: one query per signal plus its `timestamp()`."""

    def __init__(self, url: str, connect: Callable[[str], PrometheusConnect] | None = None) -> None:
        """No network call here: the first `read` is the first request."""
        self.url = url
        self._session = requests.Session()
        self._client = (connect or self._connect)(url)

    def _connect(self, url: str) -> PrometheusConnect:
        # No urllib3 retries (the client's default is 3 with back-off, 6 s per query against a closed port):
        # the next poll is the retry, and a failed read must come back quickly to say the data is stale.
        return PrometheusConnect(url=url, session=self._session, retry=Retry(total=0, raise_on_status=False))

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._session.close()

    def _query(self, query: str, timeout: float) -> list[dict[str, Any]]:
        # `params` bounds the evaluation in Prometheus; `timeout` bounds the HTTP exchange (requests has none
        # by default, so a Prometheus that accepts the connection and never answers would stall the poll).
        result: list[dict[str, Any]] = self._client.custom_query(
            query, params={"timeout": f"{timeout:g}s"}, timeout=timeout
        )
        return result

    def read(self, policy: MetricsPolicy, again: bool = False) -> list[Series]:
        """Every signal with the time of its newest raw sample; series without a recent sample are dropped."""
        queries = {
            GPU_UTIL: (policy.gpu_util_query, GPU_UTIL),
            GR_ENGINE_ACTIVE: (policy.mig_active_query, GR_ENGINE_ACTIVE),
            FB_USED: (policy.fb_used_query, FB_USED),
            FB_FREE: (policy.fb_free_query, FB_FREE),
        }
        out: list[Series] = []
        for signal, (template, metric) in queries.items():
            values = self._query(policy.query(template), policy.timeout_seconds)
            if not values:
                continue
            seen = {
                _series_key(r["metric"]): float(r["value"][1])
                for r in self._query(f"timestamp({metric})", policy.timeout_seconds)
            }
            for r in values:
                at = seen.get(_series_key(r["metric"]))
                if at is not None:
                    out.append(Series(signal, r["metric"], float(r["value"][1]), at))
        return out


class LiveMetricsCache:
    """The last snapshot read from a source, refreshed every `poll_seconds` until cancelled."""

    def __init__(
        self,
        source: MetricsSource | None,
        policy: Callable[[], MetricsPolicy],
        on_read: Callable[[bool], None],
        by_uuid: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.source = source
        self._by_uuid = by_uuid
        self._uuids: Mapping[str, str] = {}
        """The UUID map the snapshot in force was built with."""
        self.snapshot: LiveMetrics = EMPTY
        self._policy = policy
        self._on_read = on_read
        self._failing = False
        self._stale = False

    def _read(self) -> LiveMetrics:
        assert self.source is not None
        policy = self._policy()
        uuids = self._by_uuid()
        moved = uuids != self._uuids  # the slices changed which node some GPU is on: fold the series again
        series = self.source.read(policy, again=moved)
        if series is None:
            return self.snapshot
        self._uuids = uuids
        return aggregate(series, policy.node_label, time.time(), uuids)

    async def refresh(self) -> bool:
        """Read once; on failure keep the last snapshot (its samples age out) and say so once per outage."""
        if self.source is None:
            return False
        try:
            self.snapshot = await asyncio.to_thread(self._read)
        except Exception as exc:
            if not self._failing:
                log.warning("cannot read live GPU metrics, keeping the last ones until they age out: %s", exc)
            self._failing = True
            self._on_read(False)
            self.check_stale()
            return False
        if self._failing:
            log.info("live GPU metrics readable again")
        self._failing = False
        self._on_read(True)
        self.check_stale()
        return True

    def check_stale(self, now: float | None = None) -> bool:
        """Whether no GPU sample is fresher than the policy's age; logs when that starts and when it ends
        (scores turn neutral on load meanwhile, and nothing is filtered for load)."""
        max_age = self._policy().max_age_seconds
        newest = self.snapshot.newest()
        stale = newest is None or (now or time.time()) - newest > max_age
        if stale and not self._stale:
            age = "no sample at all" if newest is None else f"newest sample {(now or time.time()) - newest:.0f}s old"
            log.warning("live GPU metrics are stale (%s, max age %gs): load scores are neutral", age, max_age)
        elif not stale and self._stale:
            log.info("live GPU metrics are fresh again")
        self._stale = stale
        return stale

    async def run(self) -> None:
        """Refresh every `poll_seconds` until cancelled (the first read is the caller's, before serving)."""
        if self.source is None:
            return
        while True:
            await asyncio.sleep(self._policy().poll_seconds)
            await self.refresh()
