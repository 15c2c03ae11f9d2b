"""Run: `python -m bench.webhook.stages [--repeats N] [--number N] [--cpu C]`: the in-process cost of one admission
of the recorded review, stage by stage, with no network, no TLS and no other process.

The webhook is set up as `python -m bench.webhook` deploys it (built-in policy, the fake API server's
PriorityClasses and nodes, a live scheduler Lease), then each stage runs `--number` times in a batch, and the
batches of all stages are interleaved `--repeats` times, so a change of the machine's speed (another process on
the core) hits every stage alike. Reported per admission: the median and the minimum over batches of the CPU time
of this process (`time.process_time_ns`, which leaves out time the core spent on other processes) and the median
wall time (`time.perf_counter_ns`).

Stages, in the order an admission goes through them:

envelope       the body to the AdmissionReview's fields the webhook reads, checked (uid, kind, operation,
               namespace...); the object stays JSON text (`webhook.review.parse_review`)
pod fields     the object's text to the Pod fields the planner reads, checked and typed (`gpupack.core.k8s.decode_pod`)
pod document   the JSON form of those fields, which the patch is built on (`gpupack.core.k8s.document`)
pod bounds     the counts `webhook.bounds` caps, on that document
pod shape      the pod's shape, the key its decision is kept under (`webhook.mutate.shape_of`)
decision       `webhook.mutate.plan_pod()`: the document, the bounds and the decision with its patch operations,
               kept from the last admission of this shape (the benchmark sends one review again and again)
planned        the same with the kept decisions dropped first: the decision made, as for a pod of a new shape
plan           `webhook.mutate.plan_json()`: all of the above from the object's text (kept decision)
response       the AdmissionReview answer: base64 JSON Patch, warnings, audit annotations (`build_response`)
encode         the answer to JSON bytes and an aiohttp Response
metrics        the admission, mutation and latency counters
in-process     all of the above as the handler does it, from body bytes to Response (`_respond` after parsing)
in-process, planned  the same with the kept decisions dropped first
handler        the aiohttp handler end to end on a prepared request whose body has arrived
bare handler   the bare benchmark server's handler (read the body, answer a fixed review), for comparison
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry

from bench.webhook import bare, recorded
from gpupack.core.argtypes import positive_int
from gpupack.core.k8s import decode_pod, document
from gpupack.core.kube import ClusterFactsCache, facts_from_lists
from gpupack.core.lease_cache import LeaseCache
from gpupack.core.policy_store import PolicyStore
from gpupack.webhook import app as webhook_app
from gpupack.webhook import mutate
from gpupack.webhook.bounds import too_large
from gpupack.webhook.mutate import MutationContext, plan_json, plan_pod, shape_of
from gpupack.webhook.review import build_response, parse_review

Stage = Callable[[], Awaitable[None]]


class _LiveLease:
    """The gpupack scheduler's Lease, renewed now at every read (what the fake API server answers)."""

    def read(self, namespace: str, name: str) -> Any:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        spec = {"holderIdentity": "gpupack-scheduler-0", "leaseDurationSeconds": 15, "renewTime": now}
        return {"kind": "Lease", "metadata": {"namespace": namespace, "name": name}, "spec": spec}


class _ReadFacts:
    def __init__(self) -> None:
        self.facts = facts_from_lists({"items": recorded.priority_classes()}, {"items": recorded.nodes()})

    def read(self) -> Any:
        return self.facts


async def deployed_app() -> web.Application:
    """The webhook app with the benchmark's policy, cluster facts and a live Lease, read once."""
    store = PolicyStore(None)
    cluster = ClusterFactsCache(_ReadFacts())
    await cluster.refresh()
    lease = LeaseCache(_LiveLease())
    await lease.refresh(store.policy.scheduler)
    return webhook_app.make_app(store, cluster, CollectorRegistry(), lease=lease)


class Requests:
    """Prepared aiohttp requests with the whole body arrived, as the handler gets them from a keep-alive connection."""

    def __init__(self, app: web.Application, body: bytes) -> None:
        self.app, self.body = app, body
        probe = make_mocked_request("POST", "/mutate?timeout=5s", app=app)
        self._protocol, self._writer, self._transport = probe.protocol, probe.writer, probe.transport
        # The body reader tells the protocol to resume reading once it is drained: a plain call, not a Mock's
        # (which costs about 20 µs and is no part of either server).
        self._protocol.resume_reading = self._protocol.pause_reading = lambda *_a, **_k: None
        self._headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Host": "x"}

    def make(self) -> web.Request:
        loop = asyncio.get_running_loop()
        payload = StreamReader(self._protocol, 2**16, loop=loop)
        payload.feed_data(self.body)
        payload.feed_eof()
        return make_mocked_request(
            "POST",
            "/mutate?timeout=5s",
            self._headers,
            app=self.app,
            protocol=self._protocol,
            writer=self._writer,
            transport=self._transport,
            payload=payload,
            client_max_size=3 * 1024 * 1024,
        )


async def stages(app: web.Application, body: bytes, number: int) -> dict[str, tuple[Stage, Callable[[], None]]]:
    """Each stage as (run one batch of `number`, prepare the next batch), on inputs made beforehand."""
    state = app[webhook_app.STATE]
    parsed = parse_review(body)
    request = parsed.request
    text, namespace = request.object, request.namespace
    pod = decode_pod(text)
    doc = document(pod)
    loaded = state.policy.current
    scheduler = state.lease.status(loaded.policy.scheduler, time.time())
    context = MutationContext(loaded.policy, loaded.version, state.cluster.facts, False, scheduler)
    decision = plan_json(text, namespace, context)
    payload = build_response(request.uid, decision)
    assert decision.outcome == "mutated" and scheduler.live, (decision, scheduler)
    requests = Requests(app, body)
    batch: list[web.Request] = []

    def nothing() -> None:
        return None

    def prepare() -> None:
        batch[:] = [requests.make() for _ in range(number)]

    def loop(step: Callable[[], object]) -> Stage:
        async def run() -> None:
            for _ in range(number):
                step()

        return run

    def handler(serve: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Stage:
        async def run() -> None:
            for item in batch:
                await serve(item)

        return run

    def record() -> None:
        webhook_app._record(state, decision, False, parsed.request)
        state.metrics.latency.observe(0.0001)

    table: dict[str, tuple[Stage, Callable[[], None]]] = {
        "envelope": (loop(lambda: parse_review(body)), nothing),
        "pod fields": (loop(lambda: decode_pod(text)), nothing),
        "pod document": (loop(lambda: document(pod)), nothing),
        "pod bounds": (loop(lambda: too_large(doc)), nothing),
        "pod shape": (loop(lambda: shape_of(pod)), nothing),
        "decision": (loop(lambda: plan_pod(pod, namespace, context)), nothing),
        "planned": (loop(lambda: (forget(), plan_pod(pod, namespace, context))), nothing),
        "plan": (loop(lambda: plan_json(text, namespace, context)), nothing),
        "response": (loop(lambda: build_response(request.uid, decision)), nothing),
        "encode": (loop(lambda: webhook_app._json(200, payload)), nothing),
        "metrics": (loop(record), nothing),
        "in-process": (loop(lambda: webhook_app._respond(state, parse_review(body), False, 0.0)), nothing),
        "in-process, planned": (
            loop(lambda: (forget(), webhook_app._respond(state, parse_review(body), False, 0.0))),
            nothing,
        ),
        "handler": (handler(webhook_app.mutate), prepare),
        "bare handler": (handler(bare.mutate), prepare),
    }
    return table


def forget() -> None:
    """Drop the kept decisions: the next admission is planned."""
    mutate._DECISIONS.clear()


def _us(values: list[int], number: int) -> float:
    return statistics.median(values) / number / 1000


async def measure(repeats: int, number: int) -> dict[str, dict[str, float]]:
    """Per stage: median and minimum CPU µs per admission, and median wall µs, over `repeats` interleaved batches."""
    app = await deployed_app()
    table = await stages(app, recorded.recorded_body().encode(), number)
    cpu: dict[str, list[int]] = {name: [] for name in table}
    wall: dict[str, list[int]] = {name: [] for name in table}
    for run, prepare in table.values():  # warm-up: caches, first-call paths
        prepare()
        await run()
    gc.collect()
    gc.freeze()  # as the server does after start-up
    for _ in range(repeats):
        for name, (run, prepare) in table.items():
            prepare()
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            await run()
            w1, c1 = time.perf_counter_ns(), time.process_time_ns()
            cpu[name].append(c1 - c0)
            wall[name].append(w1 - w0)
    return {
        name: {
            "cpu_us": _us(cpu[name], number),
            "cpu_min_us": min(cpu[name]) / number / 1000,
            "wall_us": _us(wall[name], number),
        }
        for name in table
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=positive_int, default=200, help="interleaved batches per stage (200)")
    parser.add_argument("--number", type=positive_int, default=100, help="admissions per batch (100)")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    results = asyncio.run(measure(args.repeats, args.number))
    print(f"{'stage':<20}{'CPU µs median':>14}{'CPU µs min':>12}{'wall µs median':>16}")
    for name, result in results.items():
        print(f"{name:<20}{result['cpu_us']:>14.1f}{result['cpu_min_us']:>12.1f}{result['wall_us']:>16.1f}")
    print(f"\n{args.repeats} interleaved batches of {args.number} per stage; {os.cpu_count()} CPUs here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
