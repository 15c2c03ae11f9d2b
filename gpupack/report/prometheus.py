"""Usage from Prometheus (or a PromQL-compatible store: Thanos, Mimir, VictoriaMetrics): the DCGM exporter series
the extender reads, aggregated in PromQL so that a week of 1,000 nodes comes back as thousands of numbers.

Nine queries per report, only through the HTTP query API (`/api/v1/query`, `/api/v1/query_range`), two at a time
(`parallel`): per series over the window, the mean of `DCGM_FI_DEV_GPU_UTIL` (whole GPUs) and its 95th percentile,
the mean of `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (whole GPUs and MIG instances), the mean and the max of
`DCGM_FI_DEV_FB_USED`, its sample count (each series' weight), the framebuffer's size (`FB_USED + FB_FREE`), the
held-idle fraction on a grid; and per node its hourly means (a range query, 1 h step). `gpupack.report.promql` says why
each is shaped as it is. A GPU with both GPU_UTIL and engine activity gets both: GPU_UTIL counts the time any
kernel runs, so it overstates use.

A GPU's numbers come from its series (a new pod on it starts one): means weighted by each series' samples, the
max of maxima, and of 95th percentiles the highest, an upper bound of the GPU's own (a set's 95th percentile is
never above the highest of its parts'). A series whose number is NaN or infinite (it holds such a sample) is left
out; values that do not parse are skipped. None of them fails the report.

No retries and a timeout on every query, as `extender.sources.PrometheusSource`. Errors:

    OSError
     └── PrometheusError      connection refused or reset, HTTP 4xx/5xx, no answer within the timeout
    ValueError                an answer that is not Prometheus's JSON

each naming the URL and the query.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from gpupack.core.dcgm import FB_FREE, FB_USED, GR_ENGINE_ACTIVE, HOST_LABELS
from gpupack.core.policy import MetricsPolicy
from gpupack.core.thresholds import Thresholds
from gpupack.report import promql
from gpupack.report.document import iso
from gpupack.report.series import Catalog, Key, Labels, Row, Stat, gpus, hourly
from gpupack.report.sources import Progress
from gpupack.report.usage import GpuUsage, Usage, UtilizationMetric, Window

DEFAULT_TIMEOUT_SECONDS = 120.0
"""Per query. Longer than the extender's 10 s: a week of 1,000 nodes takes seconds per query, not milliseconds."""
DEFAULT_STEP_SECONDS = 60.0
"""The finest held-idle grid: about the DCGM exporter's 30 s collection, every other sample read."""
GRID_POINTS = 1_600_000
"""Series x grid points one held-idle subquery may evaluate, about 5 s on Prometheus 2.42 on this project's
2-core machine: a larger cluster gets a wider grid rather than a slower report (20,000 series over a week, the
500-node benchmark: a point every 2 hours)."""
DEFAULT_MAX_SAMPLES = 50_000_000
"""Prometheus's `--query.max-samples` default: the most points one query may hold at once."""
HELD_COST = 8
"""Points Prometheus holds at once per grid point of a series in the held-idle subquery (each signal's matrix and
each operation's result), with a margin."""
QUERIES = 9


class PrometheusError(OSError):
    """Prometheus could not be asked or refused to answer; the message names the URL and the query."""


def _number(text: object) -> float | None:
    """A sample value as Prometheus writes it ("37.5", "NaN", "+Inf"); None unless it is a finite number."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _transport(exc: requests.exceptions.RequestException, timeout: float) -> str:
    """What went wrong on the way, in a few words (requests wraps urllib3's cause, whose text repeats the URL)."""
    cause = exc.args[0] if exc.args else exc
    cause = getattr(cause, "reason", cause)  # urllib3's MaxRetryError: the error it gave up on
    if isinstance(cause, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError to urllib3: first
        return f"cannot connect: {str(cause).split(': ', 1)[-1]}"
    if isinstance(exc, requests.exceptions.Timeout) or isinstance(cause, urllib3.exceptions.TimeoutError):
        return f"no answer within {timeout:g}s"
    return str(cause)


def shown_url(url: str) -> str:
    """`url` without a `user:password@` part."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def held_step(series: int, window_seconds: float, minimum: float, max_samples: int = DEFAULT_MAX_SAMPLES) -> float:
    """The held-idle grid, seconds: `minimum`, or a whole number of minutes wide enough that the series' points
    stay within GRID_POINTS and the points held within half of `max_samples`."""
    needed = max(series, 1) * window_seconds * max(1 / GRID_POINTS, HELD_COST / (max_samples / 2))
    return minimum if needed <= minimum else float(math.ceil(needed / 60.0) * 60)


def needs(catalog: Catalog, util: Stat, engine: Stat) -> tuple[set[str], bool]:
    """The MIG profiles seen, and whether some whole GPU was seen with only one of
    GPU_UTIL and engine activity (then the held-idle and hourly queries let the other stand in)."""
    profiles: set[str] = set()
    whole_engine: set[Key] = set()
    for number in engine:
        key = catalog.series[number].key
        if key is not None and key[3] is not None:
            profiles.add(key[3])
        elif key is not None:
            whole_engine.add(key)
    whole_util = {key for number in util if (key := catalog.series[number].key) is not None}
    return profiles, whole_engine != whole_util


def present(found: Iterable[GpuUsage], by_hour: Mapping[str, Sequence[float | None]]) -> Iterator[GpuUsage]:
    """Each GPU with the hours its node reported in the window (the hours of its hourly means that have a
    number): a node the autoscaler added or removed mid-window counts only the hours it was there, to the hour.
    A node without hourly means keeps None (the whole window)."""
    hours = {node: sum(value is not None for value in values) for node, values in by_hour.items()}
    for gpu in found:
        yield gpu if gpu.node not in hours else dataclasses.replace(gpu, hours=float(hours[gpu.node]))


class PrometheusUsage:
    """`gpupack.report.sources.UsageSource` over Prometheus's HTTP query API, through prometheus-api-client."""

    def __init__(
        self,
        url: str,
        *,
        node_label: str | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        step_seconds: float = DEFAULT_STEP_SECONDS,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        parallel: int = 2,
        headers: Mapping[str, str] | None = None,
        ca_file: str | None = None,
    ) -> None:
        """`node_label`: the policy's `extender.metrics.nodeLabel` (None: `Hostname`, then `hostname`);
        `step_seconds`: the finest held-idle grid; `max_samples`: the server's `--query.max-samples` (or the
        store's equivalent); `parallel`: queries in flight at once (Prometheus evaluates one on one core);
        `headers`: sent with every query (a tenant's `X-Scope-OrgID`, `Authorization`); `ca_file`: the CA bundle
        an https URL is verified with. No network call here."""
        self.url = url
        self.shown = shown_url(url)
        """The URL without the user and password it may carry: what messages and the report's `source` say."""
        self.node_label = node_label
        self.timeout_seconds = timeout_seconds
        self.step_seconds = step_seconds
        self.max_samples = max_samples
        self.last_step: float | None = None
        """The held-idle grid the last `usage` used, seconds."""
        self._sessions = [requests.Session() for _ in range(max(1, parallel))]
        for session in self._sessions:
            if ca_file is not None:
                session.verify = ca_file
        self._clients: queue.SimpleQueue[PrometheusConnect] = queue.SimpleQueue()
        for session in self._sessions:
            # No urllib3 retries (the client's default is 3 with back-off): a report against a Prometheus that
            # is down says so at once, not after 6 s per query.
            retry = Retry(total=0, raise_on_status=False)
            self._clients.put(PrometheusConnect(url=url, headers=dict(headers or {}), session=session, retry=retry))

    @classmethod
    def from_policy(cls, url: str, policy: MetricsPolicy, **kwargs: Any) -> PrometheusUsage:
        """With the extender's settings where they overlap: its node label."""
        return cls(url, node_label=policy.node_label, **kwargs)

    def close(self) -> None:
        """Release the HTTP connection pools."""
        for session in self._sessions:
            session.close()

    def _ask(self, query: str, call: Callable[[PrometheusConnect], Any]) -> list[dict[str, Any]]:
        def failed(why: str) -> str:
            return f"Prometheus {self.shown}: {why}; query: {query if len(query) <= 300 else query[:300] + '...'}"

        client = self._clients.get()
        try:
            result = call(client)
        except requests.exceptions.JSONDecodeError as exc:
            raise ValueError(failed(f"the answer is not JSON ({exc})")) from exc
        except requests.exceptions.RequestException as exc:
            raise PrometheusError(failed(_transport(exc, self.timeout_seconds))) from exc
        except PrometheusApiClientException as exc:
            raise PrometheusError(failed(str(exc)[:500])) from exc
        except (KeyError, TypeError) as exc:
            raise ValueError(failed(f"the answer has no data.result ({exc!r})")) from exc
        finally:
            self._clients.put(client)
        if not isinstance(result, list) or not all(
            isinstance(r, dict) and isinstance(r.get("metric"), dict) for r in result
        ):
            raise ValueError(failed("the answer's data.result is not a list of series"))
        return result

    def instant(self, query: str, at: float) -> list[Row]:
        """Each series of an instant query at `at` with its value (None unless a finite number)."""
        params = {"time": f"{at:.3f}", "timeout": f"{self.timeout_seconds:g}s"}
        result = self._ask(query, lambda c: c.custom_query(query, params=params, timeout=self.timeout_seconds))
        try:
            return [(r["metric"], _number(r["value"][1])) for r in result]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"Prometheus {self.shown}: an instant answer without values; query: {query[:300]}"
            ) from exc

    def range(
        self, query: str, start: float, end: float, step: float
    ) -> list[tuple[Labels, list[tuple[float, float | None]]]]:
        """Each series of a range query (whole seconds: the client rounds `start` and `end`) with its points."""
        params = {"timeout": f"{self.timeout_seconds:g}s"}
        result = self._ask(
            query,
            lambda c: c.custom_query_range(
                query,
                start_time=datetime.fromtimestamp(start, UTC),
                end_time=datetime.fromtimestamp(end, UTC),
                step=f"{step:g}",
                params=params,
                timeout=self.timeout_seconds,
            ),
        )
        try:
            return [(r["metric"], [(float(p[0]), _number(p[1])) for p in r["values"]]) for r in result]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"Prometheus {self.shown}: a range answer without values; query: {query[:300]}") from exc

    def _check_found(self, catalog: Catalog, window: Window) -> None:
        """A report of no GPUs is a wrong URL, tenant or label, not a finding: say which."""
        span = f"{iso(window.start)}..{iso(window.end)}"
        if not catalog.series:
            raise ValueError(
                f"Prometheus {self.shown}: no DCGM exporter series ({FB_USED}, ...) for {span}: does this "
                "Prometheus (or tenant: --prometheus-header X-Scope-OrgID=...) scrape the DCGM exporter?"
            )
        if all(info.key is None for info in catalog.series):
            labels = self.node_label or " or ".join(HOST_LABELS)
            raise ValueError(
                f"Prometheus {self.shown}: {len(catalog.series)} DCGM series for {span}, none with a node label "
                f"({labels}) and a gpu label: set extender.metrics.nodeLabel in --config to the label that holds "
                "the node's name"
            )

    def total(self, template: str, window: Window) -> float:
        """The work done in `window` by a business metric (`--work-query`): `template` with `{window}` replaced by
        the window's length, evaluated at its end (1 ms before, as the usage queries), its series summed, so
        `sum(increase(tokens_total[{window}]))` and `increase(tokens_total[{window}])` give the same total.
        Raises ValueError when the answer holds no finite number: no work to divide by."""
        query = template.replace("{window}", promql.duration(window.seconds))
        values = [value for _, value in self.instant(query, window.end - 0.001)]
        known = [value for value in values if value is not None]
        if not known:
            why = "no series" if not values else "no finite value"
            span = f"{iso(window.start)}..{iso(window.end)}"
            raise ValueError(f"Prometheus {self.shown}: --work-query gave {why} for {span}; query: {query}")
        return sum(known)

    def usage(
        self, window: Window, metric: UtilizationMetric, thresholds: Thresholds, progress: Progress | None = None
    ) -> Usage:
        """Every GPU and MIG instance that reported during `window`, and every node's hourly means.
        Raises PrometheusError (an OSError) or ValueError naming the URL and the query."""
        at, seconds = window.end - 0.001, window.seconds
        per_series = {
            "util": promql.over_window("avg_over_time", promql.WHOLE_UTIL, seconds),
            "engine": promql.over_window("avg_over_time", GR_ENGINE_ACTIVE, seconds),
            "count": promql.over_window("count_over_time", FB_USED, seconds),
            "used": promql.over_window("avg_over_time", FB_USED, seconds),
            "used_max": promql.over_window("max_over_time", FB_USED, seconds),
            "free": promql.over_window("avg_over_time", FB_FREE, seconds),
            "p95": promql.p95(seconds),
        }
        done = 0

        def report(what: str) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(f"Prometheus: {what}", done, QUERIES)

        if progress is not None:
            progress("Prometheus: querying", 0, QUERIES)
        catalog = Catalog(self.node_label)
        stats: dict[str, Stat] = {}
        pool = ThreadPoolExecutor(max_workers=len(self._sessions), thread_name_prefix="prometheus")
        try:
            futures = {
                stat: pool.submit(lambda q: catalog.add(self.instant(q, at)), query)
                for stat, query in per_series.items()
            }
            for stat in ("count", "util", "engine"):  # what the held grid and the hourly query depend on
                stats[stat] = futures[stat].result()
                report(stat)
            step = held_step(len(stats["count"]), seconds, self.step_seconds, self.max_samples)
            self.last_step = step
            profiles, fallback = needs(catalog, stats["util"], stats["engine"])
            held_query = promql.held_idle(
                seconds, step, metric, thresholds.held_memory, thresholds.held_compute, fallback
            )
            held = pool.submit(lambda: catalog.add(self.instant(held_query, at)))
            hours = max(1, math.ceil(window.hours))
            first = window.start + 3600.0
            hour_query = promql.hourly(metric, self.node_label, profiles, fallback)
            hour_future = pool.submit(self.range, hour_query, first, first + (hours - 1) * 3600.0, 3600.0)
            for stat in ("used", "used_max", "free", "p95"):
                stats[stat] = futures[stat].result()
                report(stat)
            stats["held"] = held.result()
            report("held-idle")
            hour_rows = hour_future.result()
            report("hourly")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # after a failure, the queries not yet sent never are
        self._check_found(catalog, window)
        by_hour = hourly(hour_rows, self.node_label, round(first), hours)
        return Usage(
            window=window,
            source=f"Prometheus {self.shown}",
            gpus=tuple(present(gpus(catalog, stats), by_hour)),
            hourly=by_hour,
            samples=sum(len(numbers) for numbers in stats.values()) + sum(len(points) for _, points in hour_rows),
            metric=metric,
        )
