"""The webhook's HTTP layer: parse the AdmissionReview, call the pure planner, serialise the answer.

Routes: `POST /mutate` for pods that opted in by label, `POST /mutate/opted-in-namespace` for pods of a
namespace labelled `gpupack.io/enabled: "true"` (the API server's namespaceSelector decides which path is
called), plus `/healthz`, `/readyz`, `/metrics`. No input yields a 500: bad bodies get 400/408/413, and an
unexpected error is logged with the request uid and answered as a refusal with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.jsonbound import json_values_bound
from gpupack.core.kube import ClusterFactsCache
from gpupack.core.lease_cache import LeaseCache
from gpupack.core.policy_store import PolicyStore
from gpupack.core.server import BodyError, add_standard_routes, read_body
from gpupack.webhook.bounds import MAX_REVIEW_VALUES
from gpupack.webhook.metrics import WebhookMetrics
from gpupack.webhook.mutate import Decision, InvalidObject, MutationContext, plan_json
from gpupack.webhook.review import (
    LARGE_BODY,
    PAUSED_GC,
    AdmissionRequest,
    AdmissionReview,
    BadReview,
    build_response,
    error_response,
    parse_review,
)
from gpupack.webhook.unrouted import UnroutedLog

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's largest object is 1.5 MiB; a review carries one


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Limits of the HTTP layer."""

    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = 10.0


@dataclass(slots=True)
class WebhookState:
    """What the handler needs: the policy in force, the cluster snapshot, metrics and limits."""

    policy: PolicyStore
    cluster: ClusterFactsCache
    metrics: WebhookMetrics
    settings: WebhookSettings
    lease: LeaseCache
    """The gpupack scheduler's Lease (read in the background): whether GPU pods may be sent to it."""
    unrouted: UnroutedLog = field(default_factory=UnroutedLog)
    large_reads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LARGE_READS))
    """Held from reading a large review's body until it is freed (see `_handle_large`)."""
    large: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    """Held while a large review is decoded, planned and freed: one at a time."""
    contexts: dict[bool, MutationContext] = field(default_factory=dict)
    """The last context made for each kind of path (labelled pods, opted-in namespaces), reused while the policy,
    the cluster snapshot and the verdict on the scheduler are the same objects."""

    def context(self, namespace_opted_in: bool) -> MutationContext:
        """What the planner needs besides the pod, now."""
        loaded, facts = self.policy.current, self.cluster.facts
        scheduler = self.lease.status(loaded.policy.scheduler, time.time())
        last = self.contexts.get(namespace_opted_in)
        if (
            last is not None
            and last.policy is loaded.policy
            and last.version is loaded.version
            and last.facts is facts
            and last.scheduler is scheduler
        ):
            return last
        context = MutationContext(loaded.policy, loaded.version, facts, namespace_opted_in, scheduler)
        self.contexts[namespace_opted_in] = context
        return context


LARGE_READS = 4
"""Large reviews whose bodies may be held at once: a slow client holds one for at most the body timeout."""
LARGE_WAIT_SECONDS = 2.0
"""How long a large review waits for its turn before 503: well inside the registration's 5 s timeout."""

STATE: web.AppKey[WebhookState] = web.AppKey("webhook_state")


def _json(status: int, payload: object) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


def _problem(state: WebhookState, status: int, reason: str, message: str) -> web.Response:
    state.metrics.bad_requests.labels(reason).inc()
    return _json(status, {"error": message})


def _record(state: WebhookState, decision: Decision, dry_run: bool, req: AdmissionRequest) -> None:
    metrics = state.metrics
    metrics.admitted(decision.outcome, decision.workload, dry_run)
    mode = "audit" if decision.outcome == "audited" else "enforce"
    for kind in decision.change_kinds:
        metrics.mutated(kind, mode)
    if decision.unrouted is not None and mode == "enforce" and not dry_run:  # a pod that exists, unpacked
        metrics.unrouted_pod(decision.unrouted.reason or "unknown")
        state.unrouted.record(decision.unrouted, state.policy.policy.scheduler, f"{req.namespace}/{req.name}")
    if decision.outcome == "audited":
        log.info("audit: would %s", decision.message)


async def _handle(request: web.Request, namespace_opted_in: bool) -> web.Response:
    state = request.app[STATE]
    started = time.perf_counter()
    declared = request.content_length
    if declared is None or declared >= LARGE_BODY:
        return await _handle_large(request, state, namespace_opted_in, started)
    try:
        body = await read_body(request, state.settings.body_timeout, state.settings.max_body_bytes)
    except BodyError as exc:
        return _problem(state, exc.status, exc.reason, str(exc))
    try:
        return _respond(state, parse_review(body), namespace_opted_in, started)
    except BadReview as exc:
        return _problem(state, 400, "not_admission_review", str(exc))


async def _handle_large(
    request: web.Request, state: WebhookState, namespace_opted_in: bool, started: float
) -> web.Response:
    """A review of LARGE_BODY or more, or of unknown length (the API server's are a few KiB and say theirs).

    Memory: a 3 MiB review decodes to 25-95 MB of objects, so two decoded at once could take the webhook past its
    limit. At most LARGE_READS large bodies are held at once (each read within the body timeout, so a slow client
    holds its place no longer), and one at a time is decoded, planned and freed; a review that waits longer than
    LARGE_WAIT_SECONDS for either gets 503 (its unread body stays within aiohttp's 128 KiB read-ahead).
    Latency: it is decoded, then the event loop turns before it is planned and freed, so no single stretch holds
    up small admissions for all of it.
    """
    if not await _turn(state.large_reads):
        return _problem(state, 503, "busy", "too many large admission reviews are being read; try again")
    try:
        try:
            body = await read_body(request, state.settings.body_timeout, state.settings.max_body_bytes)
        except BodyError as exc:
            return _problem(state, exc.status, exc.reason, str(exc))
        values = json_values_bound(body)
        if values > MAX_REVIEW_VALUES:
            message = (
                f"the review holds up to {values} JSON values, more than the {MAX_REVIEW_VALUES} gpupack decodes "
                "(a pod's review has a few thousand)"
            )
            return _problem(state, 413, "too_large", message)
        if not await _turn(state.large):
            return _problem(state, 503, "busy", "another large admission review is being processed; try again")
        try:
            with PAUSED_GC:
                try:
                    review = parse_review(body)
                except BadReview as exc:
                    return _problem(state, 400, "not_admission_review", str(exc))
                del body
                await asyncio.sleep(0)
                response = _respond(state, review, namespace_opted_in, started)
                del review
            return response
        finally:
            state.large.release()
    finally:
        state.large_reads.release()


async def _turn(semaphore: asyncio.Semaphore) -> bool:
    """Acquire `semaphore` within LARGE_WAIT_SECONDS; False when the wait ran out."""
    try:
        async with asyncio.timeout(LARGE_WAIT_SECONDS):
            await semaphore.acquire()
    except TimeoutError:
        return False
    return True


def _respond(state: WebhookState, review: AdmissionReview, namespace_opted_in: bool, started: float) -> web.Response:
    """The answer to a parsed review: the decision, its metrics, and the serialised AdmissionReview."""
    req = review.request
    uid = req.uid
    try:
        if req.kind.kind != "Pod" or req.operation != "CREATE":
            decision = Decision(True, "skipped", message=f"{req.operation} {req.kind.kind} is not handled")
        else:
            decision = plan_json(req.object, req.namespace, state.context(namespace_opted_in))
        payload = build_response(uid, decision)
        _record(state, decision, bool(req.dry_run), req)
    except InvalidObject as exc:
        return _problem(state, 400, "invalid_object", str(exc))
    except Exception:
        log.exception("admission failed", extra={"uid": uid, "pod": f"{req.namespace}/{req.name}"})
        state.metrics.admitted("error", "none", bool(req.dry_run))
        payload = error_response(uid, f"gpupack: internal error while admitting this pod (request uid {uid})")
    state.metrics.latency.observe(time.perf_counter() - started)
    return _json(200, payload)


async def mutate(request: web.Request) -> web.Response:
    """An AdmissionReview v1 for a pod that opted in by label (`gpupack.io/workload`; the
    MutatingWebhookConfiguration's object selector sends only those, with `failurePolicy: Fail`): the review back
    with the JSON patch, the warnings and the audit annotations, or the refusal of an invalid label in
    `response.status`. A body that is not an AdmissionReview v1 gets HTTP 400 naming the field, one over
    `--max-body-bytes` 413, one slower than `--body-timeout` 408; an unexpected failure is a refusal with
    `status.code` 500 inside an HTTP 200 review, so an opted-in GPU pod is never created unmutated."""
    return await _handle(request, namespace_opted_in=False)


async def mutate_opted_in_namespace(request: web.Request) -> web.Response:
    """The same for pods of a namespace labelled `gpupack.io/enabled: "true"` that carry no workload label (the
    second webhook entry, `failurePolicy: Ignore`): GPU pods get the policy's `defaultClass`, other pods are
    admitted unchanged."""
    return await _handle(request, namespace_opted_in=True)


def make_app(
    policy: PolicyStore,
    cluster: ClusterFactsCache,
    registry: CollectorRegistry,
    settings: WebhookSettings | None = None,
    metrics: WebhookMetrics | None = None,
    lease: LeaseCache | None = None,
) -> web.Application:
    """The webhook application; background tasks (policy, cluster and Lease refresh) are the caller's to start.

    Without `lease` the scheduler's Lease is never read: GPU pods stay on default-scheduler, with a warning.
    """
    settings = settings or WebhookSettings()
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[STATE] = WebhookState(policy, cluster, metrics or WebhookMetrics(registry), settings, lease or LeaseCache(None))
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/mutate/opted-in-namespace", mutate_opted_in_namespace)
    add_standard_routes(app, registry, ready=lambda: True)
    return app
