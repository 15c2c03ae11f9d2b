"""The extender's HTTP layer: parse ExtenderArgs, call the pure verbs, serialise the answer in band.

Routes: `POST /filter`, `POST /prioritize`, `POST /preempt`, `GET /state`, plus `/healthz`, `/readyz` (false
until the first list of nodes and pods is in) and `/metrics`. kube-scheduler treats any status but 200 as an
error that fails the scheduling cycle, so filter and prioritize always answer HTTP 200: errors go in `Error`
(filter) or give an empty list (prioritize), with a log line. The preempt result has no error field, and an
empty answer would cancel the preemption, so there a body that cannot be read gets HTTP 400, which makes
kube-scheduler skip this ignorable extender and keep its own candidates.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.policy_store import PolicyStore
from gpupack.core.server import BodyError, add_standard_routes, read_body
from gpupack.extender.demand import DemandError, RequestsCache, demand_of
from gpupack.extender.informer import InformerCounters
from gpupack.extender.live import EMPTY, LiveMetrics
from gpupack.extender.metrics import ExtenderMetrics
from gpupack.extender.preemption import PreemptOutcome
from gpupack.extender.state import ClusterState
from gpupack.extender.typical import ShapeBook
from gpupack.extender.verbs import DecisionCache, View, describe_state, filter_nodes, preempt_nodes, prioritize_nodes
from gpupack.extender.wire import (
    MAX_CANDIDATES,
    MAX_DECODED_BYTES,
    ArgsError,
    ExtenderArgs,
    filter_result,
    parse_args,
    parse_preemption_args,
    preemption_result,
    priority_list,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024  # a full NodeList of 5,000 nodes is tens of MiB


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """Limits of the HTTP layer."""

    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = 5.0
    """kube-scheduler's default httpTimeout: a body slower than this is useless anyway."""
    max_candidates: int = MAX_CANDIDATES
    """Candidate nodes per request (`extender.wire.MAX_CANDIDATES`)."""
    max_decoded_bytes: int = MAX_DECODED_BYTES
    """Decoded objects per body, estimated before decoding (`extender.wire.MAX_DECODED_BYTES`)."""


RECOUNT_SECONDS = 60.0
"""Least time between two counts of the typical pod shapes that pod churn triggers (a full list always counts)."""


@dataclass(slots=True)
class Extender:
    """What the handlers read: the policy store, the watch cache, the live metrics snapshot."""

    policy: PolicyStore
    state: ClusterState
    settings: ExtenderSettings
    live: LiveMetrics = EMPTY
    metrics: ExtenderMetrics | None = None
    watch: InformerCounters | None = None
    """The list + watch counters (None without an API watch)."""
    cache: DecisionCache = field(default_factory=DecisionCache)
    requests: RequestsCache = field(default_factory=RequestsCache)
    """Pending pods' requests by container-resources shape: kube-scheduler asks about a Deployment's replicas."""
    book: ShapeBook = field(default_factory=lambda: ShapeBook(min_interval=RECOUNT_SECONDS))
    """The cluster's typical pod shapes, re-counted from the watch cache as pods change."""

    def view(self) -> View:
        """A consistent set of inputs for one request."""
        current = self.policy.current
        if current.policy.extender.scoring == "gpupack":
            self.book.refresh(self.state)
        return View(self.state, self.live, current.policy, current.version, self.cache, self.book)


EXTENDER: web.AppKey[Extender] = web.AppKey("extender")
_BAD_INPUT = (ArgsError, DemandError, BodyError)


async def _args(request: web.Request, extender: Extender) -> ExtenderArgs:
    raw = await read_body(request, extender.settings.body_timeout, extender.settings.max_body_bytes)
    return parse_args(raw, extender.settings.max_candidates, extender.settings.max_decoded_bytes)


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def _refused(extender: Extender, verb: str, exc: Exception, request: web.Request) -> None:
    if isinstance(exc, _BAD_INPUT):
        log.warning("bad %s request from %s: %s", verb, request.remote, exc)
    else:
        log.exception("%s failed", verb)
    if extender.metrics is not None:
        extender.metrics.bad_requests[verb].inc()


async def filter_handler(request: web.Request) -> web.Response:
    """ExtenderArgs -> ExtenderFilterResult, in the form received (`NodeNames` with `nodeCacheCapable`, else full
    `Nodes`): the nodes kept, and each node removed with its reason in `FailedNodes` (preemption may help) or
    `FailedAndUnresolvableNodes` (it cannot: spot for a pod that must not run there, no such GPU resource, every
    GPU hot for latency-critical inference). A body that cannot be read is answered in band, with `Error` set and
    no node kept, never with an HTTP error."""
    extender = request.app[EXTENDER]
    started = time.perf_counter()
    args: ExtenderArgs | None = None
    try:
        args = await _args(request, extender)
        view = extender.view()
        demand = demand_of(args.pod, view.policy, extender.requests)
        outcome = filter_nodes(demand, args, view)
        body = filter_result(args, outcome.passed, outcome.failed, outcome.unresolvable)
        if extender.metrics is not None and outcome.kinds:
            for kind, count in Counter(outcome.kinds).items():  # one locked increment per reason
                extender.metrics.filtered[kind].inc(count)
    except Exception as exc:
        _refused(extender, "filter", exc, request)
        body = filter_result(args, [], {}, {}, error=f"gpupack extender: {exc}")
    if extender.metrics is not None:
        extender.metrics.latency["filter"].observe(time.perf_counter() - started)
    return _json(body)


async def prioritize_handler(request: web.Request) -> web.Response:
    """ExtenderArgs -> HostPriorityList: a score of 0..10 per node (`extender.scoring`), which kube-scheduler
    multiplies by the extender's weight and adds to its own plugins' scores. The best node where the pod fits is
    then counted against for `assumeSeconds` until the pod shows up bound. An empty list when the request cannot
    be read."""
    extender = request.app[EXTENDER]
    started = time.perf_counter()
    try:
        args = await _args(request, extender)
        view = extender.view()
        demand = demand_of(args.pod, view.policy, extender.requests)
        body = priority_list(args.names, prioritize_nodes(demand, args, view))
    except Exception as exc:
        _refused(extender, "prioritize", exc, request)
        body = b"[]"
    if extender.metrics is not None:
        extender.metrics.latency["prioritize"].observe(time.perf_counter() - started)
    return _json(body)


async def preempt_handler(request: web.Request) -> web.Response:
    """ExtenderPreemptionArgs -> ExtenderPreemptionResult: the candidates the pod would really take, each with the
    fewest victims it needs. A body that is not an ExtenderPreemptionArgs gets HTTP 400 (kube-scheduler then skips
    this ignorable extender and keeps its own candidates); a pod that cannot be read, or a failure deciding, gets
    the candidates back as received, which is the same as giving no opinion."""
    extender = request.app[EXTENDER]
    started = time.perf_counter()
    try:
        raw = await read_body(request, extender.settings.body_timeout, extender.settings.max_body_bytes)
        args = parse_preemption_args(raw, extender.settings.max_candidates, extender.settings.max_decoded_bytes)
    except (ArgsError, BodyError) as exc:
        _refused(extender, "preempt", exc, request)
        if extender.metrics is not None:
            extender.metrics.latency["preempt"].observe(time.perf_counter() - started)
        return web.Response(status=400, text=f"gpupack extender: {exc}")
    try:
        view = extender.view()
        demand = demand_of(args.pod, view.policy, extender.requests)
        outcome = preempt_nodes(demand, args, view)
        body = preemption_result({n: (k.victims, k.pdb_violations) for n, k in outcome.kept.items()})
        _count_preemption(extender, outcome, demand.key)
    except Exception as exc:
        _refused(extender, "preempt", exc, request)
        body = preemption_result(args.victims)
    if extender.metrics is not None:
        extender.metrics.latency["preempt"].observe(time.perf_counter() - started)
    return _json(body)


def _count_preemption(extender: Extender, outcome: PreemptOutcome, pod: str) -> None:
    """One log line for the decision (every dropped node with its reason) and the metrics."""
    if outcome.dropped:
        log.info(
            "preemption for %s: kept %s, dropped %s",
            pod,
            ", ".join(sorted(outcome.kept)) or "nothing",
            "; ".join(f"{node}: {d.reason}" for node, d in sorted(outcome.dropped.items())),
        )
    if extender.metrics is None:
        return
    counts = Counter(d.kind for d in outcome.dropped.values())
    counts["kept"] = len(outcome.kept)
    for kind, count in counts.items():
        if count:
            extender.metrics.preempt_candidates.labels(kind).inc(count)
    if outcome.trimmed:
        extender.metrics.preempt_trimmed.inc(outcome.trimmed)


async def state_handler(request: web.Request) -> web.Response:
    """What the extender believes about each node, as JSON: its GPU resources, what bound pods and live
    assumptions use, what is free, the live utilization of its GPUs and their age. For people debugging a
    placement (`kubectl -n gpupack-system port-forward deploy/gpupack-scheduler 8888`)."""
    extender = request.app[EXTENDER]
    return _json(orjson.dumps(describe_state(extender.view()), option=orjson.OPT_INDENT_2))


def make_app(extender: Extender, registry: CollectorRegistry) -> web.Application:
    """The extender application; background tasks (watch, metrics, policy) are the caller's to start."""
    app = web.Application(client_max_size=extender.settings.max_body_bytes)
    app[EXTENDER] = extender
    if extender.metrics is None:
        extender.metrics = ExtenderMetrics(
            registry,
            lambda: extender.state,
            lambda: extender.live,
            lambda: extender.policy.policy.extender.metrics.max_age_seconds,
            lambda: extender.watch,
        )
    app.router.add_post("/filter", filter_handler)
    app.router.add_post("/prioritize", prioritize_handler)
    app.router.add_post("/preempt", preempt_handler)
    app.router.add_get("/state", state_handler)
    add_standard_routes(app, registry, ready=lambda: extender.state.synced)
    return app
