"""`gpupack demo` (`make run`): the webhook and the extender on localhost over TLS, fed an embedded cluster.

Every submitted pod goes through the webhook as an AdmissionReview (the webhook sees the gpupack scheduler's
leader Lease renewed, so it names `gpupack-scheduler` in GPU pods), then, as the scheduler the pod names would
send it, through an extender's `/filter` and `/prioritize`, and is bound to the best node: pods on
`gpupack-scheduler` through the gpupack extender, any other through one scoring like the default scheduler
(`spread`). The same pods are placed a second time all by `spread`, to show what gpupack saves.
"""

from __future__ import annotations

import base64
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.cluster import ClusterFacts
from gpupack.core.contract import DEFAULT_SCHEDULER
from gpupack.core.kube import facts_from_lists
from gpupack.core.policy import parse_policy
from gpupack.core.server import ServeOptions, start_server
from gpupack.demo.admission import describe, ensure_certs
from gpupack.demo.cluster import NODES, RUNNING, SUBMITTED, Submitted, exporters, leader_lease, running_pods
from gpupack.demo.week import report_week
from gpupack.extender.app import EXTENDER, Extender
from gpupack.extender.demand import pod_key, pod_requests
from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.service import ExtenderConfig
from gpupack.extender.service import build_app as build_extender
from gpupack.placement.accounting import Cost, cost
from gpupack.placement.scheduler import feasible, final_scores, preferred_affinity
from gpupack.testing.dcgm import exposition
from gpupack.testing.pods import review
from gpupack.webhook.patches import apply_patch
from gpupack.webhook.service import WebhookConfig
from gpupack.webhook.service import build_app as build_webhook


class NodesReader:
    """The webhook's view of the embedded cluster: which MIG profiles the nodes advertise."""

    def read(self) -> ClusterFacts:
        return facts_from_lists(None, {"items": NODES})


class LiveLeaseReader:
    """The webhook's view of the gpupack scheduler: a leader that renewed its Lease just before every read."""

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        return leader_lease(namespace, name, time.time())


@dataclass(frozen=True, slots=True)
class Scheduler:
    """An extender as the demo's kube-scheduler calls it: its URL, and its state (where bindings are recorded)."""

    url: str
    extender: Extender


@dataclass
class Placement:
    """Where one scoring policy put the submitted pods."""

    scoring: str
    used: dict[str, dict[str, int]]
    busy: float
    lines: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)

    def add(self, node: str, requests: dict[str, int]) -> None:
        """Count a bound pod's requests on its node."""
        used = self.used.setdefault(node, {})
        for resource, n in requests.items():
            used[resource] = used.get(resource, 0) + n


@asynccontextmanager
async def serving(app: Any, cert: Path, key: Path) -> AsyncIterator[str]:
    """Serve `app` on a free loopback port over TLS; yields its base URL."""
    serving = await start_server(app, ServeOptions("127.0.0.1", 0, cert, key))
    try:
        yield f"https://127.0.0.1:{serving.port}"
    finally:
        await serving.stop()


def write_cluster(directory: Path) -> tuple[Path, Path, Path]:
    """nodes.json, pods.json and the DCGM exporter snapshot dcgm.txt."""
    directory.mkdir(parents=True, exist_ok=True)
    nodes, pods, dcgm = directory / "nodes.json", directory / "pods.json", directory / "dcgm.txt"
    nodes.write_bytes(orjson.dumps({"kind": "NodeList", "items": NODES}))
    pods.write_bytes(orjson.dumps({"kind": "PodList", "items": running_pods()}))
    dcgm.write_text(exposition(exporters()))
    return nodes, pods, dcgm


async def admit(session: aiohttp.ClientSession, url: str, item: Submitted) -> tuple[dict[str, Any], dict[str, Any]]:
    """The webhook's response and the pod as the API server would store it."""
    async with session.post(f"{url}{item.path}?timeout=5s", data=orjson.dumps(review(item.pod))) as resp:
        response: dict[str, Any] = (await resp.json())["response"]
    ops = orjson.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    return response, apply_patch(item.pod, ops)


async def place(
    session: aiohttp.ClientSession,
    schedulers: Mapping[str, Scheduler],
    default: Scheduler,
    scoring: str,
    pods: list[tuple[dict[str, Any], float]],
    records: dict[str, NodeRecord],
) -> Placement:
    """Schedule `pods` in order: kube-scheduler's own filters, then the filter and scores of the extender of the
    scheduler the pod names (`schedulers` by `schedulerName`; `default` for any other)."""
    result = Placement(scoring, {}, 0.0)
    extenders = list({id(s.extender): s.extender for s in [*schedulers.values(), default]}.values())  # each once
    for pod_json in running_pods():
        result.add(pod_json["spec"]["nodeName"], pod_requests(pod_json["spec"]))
    nodes = {n["metadata"]["name"]: n for n in NODES}
    labels = {name: n["metadata"].get("labels") or {} for name, n in nodes.items()}
    for pod, busy in pods:
        name = pod["metadata"]["name"]
        requests = pod_requests(pod["spec"])
        candidates = [
            node for node, n in nodes.items() if feasible(pod, n, records[node].allocatable, result.used.get(node, {}))
        ]
        args = {"Pod": pod, "Nodes": None, "NodeNames": candidates}
        scheduler = schedulers.get(pod["spec"].get("schedulerName") or DEFAULT_SCHEDULER, default)
        async with session.post(f"{scheduler.url}/filter", json=args) as resp:
            filtered = await resp.json()
        passed: list[str] = filtered["NodeNames"] or []
        if not passed:
            reasons = {**filtered["FailedNodes"], **filtered["FailedAndUnresolvableNodes"]}
            result.unplaced.append(name)
            result.lines.append(f"   {name:<14} unschedulable: {reasons or 'no node passes the scheduler filters'}")
            continue
        scores = {passed[0]: 0}
        if len(passed) > 1:  # kube-scheduler calls prioritize only with more than one feasible node
            async with session.post(f"{scheduler.url}/prioritize", json={**args, "NodeNames": passed}) as resp:
                scores = {e["Host"]: e["Score"] for e in await resp.json()}
        totals = final_scores(scores, {n: preferred_affinity(pod, labels[n]) for n in passed})
        best = max(passed, key=lambda n: totals.get(n, 0))
        result.add(best, requests)
        # The binding, as every extender's pod watch would deliver it moments later.
        for extender in extenders:
            extender.state.upsert_pod(pod_key(pod["metadata"]), best, tuple(requests.items()))
        gpu = next((f"{n} {r}" for r, n in requests.items() if r.startswith("nvidia.com/")), "")
        record = records[best]
        result.busy += busy * sum(n * record.shares.get(r, 0.0) for r, n in requests.items())
        ranked = " ".join(f"{n}={s}" for n, s in sorted(scores.items(), key=lambda x: -x[1])[:4])
        via = f" ({DEFAULT_SCHEDULER})" if schedulers and scheduler is default else ""
        result.lines.append(f"   {name:<14} -> {best:<12} {gpu:<28} scores: {ranked}{via}")
    return result


def running_busy(records: dict[str, NodeRecord]) -> float:
    """GPUs' worth of work done by the pods already running."""
    return sum(r.busy * r.count * records[r.node].shares[r.resource] for r in RUNNING)


def summary(gpupack: Cost, spread: Cost) -> list[str]:
    """The before/after table."""
    rows = [
        (
            "GPUs in use",
            f"{spread.gpus_in_use} of {spread.gpus_total}",
            f"{gpupack.gpus_in_use} of {gpupack.gpus_total}",
        ),
        ("GPU nodes left empty", str(len(spread.empty_nodes)), str(len(gpupack.empty_nodes))),
        ("mean utilization of GPUs in use", f"{spread.mean_utilization:.0%}", f"{gpupack.mean_utilization:.0%}"),
    ]
    out = [f"   {'':<34}{'spread (default)':>18}{'gpupack':>12}"]
    out += [f"   {label:<34}{a:>18}{b:>12}" for label, a, b in rows]
    out.append(f"   empty under gpupack (Cluster Autoscaler can remove them): {', '.join(gpupack.empty_nodes) or '-'}")
    return out


async def run_demo(workdir: Path, prices: Path | None = None) -> int:
    """Run the whole demo; returns the exit code. `prices` prices the week's report (`make run` passes the
    example prices)."""
    cert, key, ca = ensure_certs(workdir / "certs")
    nodes_file, pods_file, dcgm_file = write_cluster(workdir / "cluster")
    policies = {}
    for scoring in ("gpupack", "spread"):
        policies[scoring] = workdir / f"policy-{scoring}.yaml"
        policies[scoring].write_text(f"extender:\n  scoring: {scoring}\n")
    policy = parse_policy(b"")
    records = {n["metadata"]["name"]: node_from_json(n, policy) for n in NODES}
    webhook = build_webhook(
        WebhookConfig(None, ServeOptions()), CollectorRegistry(), reader=NodesReader(), lease_reader=LiveLeaseReader()
    )
    name = policy.scheduler.name or DEFAULT_SCHEDULER
    client_tls = ssl.create_default_context(cafile=str(ca))
    connector = aiohttp.TCPConnector(ssl=client_tls)

    def extender(scoring: str) -> web.Application:
        config = ExtenderConfig(
            policies[scoring], ServeOptions(), nodes_file=nodes_file, pods_file=pods_file, metrics_file=dcgm_file
        )
        return build_extender(config, CollectorRegistry())

    async with aiohttp.ClientSession(connector=connector) as session, serving(webhook, cert, key) as hook_url:
        print(
            f"gpupack webhook on {hook_url} (built-in policy), embedded cluster: {len(NODES)} GPU nodes, "
            f"{name} leading (its Lease renewed)\n"
        )
        admitted: list[tuple[dict[str, Any], float]] = []
        for item in SUBMITTED:
            response, pod = await admit(session, hook_url, item)
            print("\n".join(describe(item.title or "another replica", item.pod, response)) + "\n")
            if response["allowed"] and any(r.startswith("nvidia.com/") for r in pod_requests(pod["spec"])):
                admitted.append((pod, item.busy))
        placements: dict[str, Placement] = {}
        # gpupack: what the pods name decides which extender places them, as in a cluster running both schedulers.
        packing, default = extender("gpupack"), extender("spread")
        async with serving(packing, cert, key) as packing_url, serving(default, cert, key) as default_url:
            routed = {name: Scheduler(packing_url, packing[EXTENDER])}
            others = Scheduler(default_url, default[EXTENDER])
            placements["gpupack"] = await place(session, routed, others, "gpupack", admitted, records)
        baseline = extender("spread")  # every pod under the default scheduler's scoring
        async with serving(baseline, cert, key) as url:
            placements["spread"] = await place(
                session, {}, Scheduler(url, baseline[EXTENDER]), "spread", admitted, records
            )
    on_gpupack = sum(pod["spec"].get("schedulerName") == name for pod, _ in admitted)
    elsewhere = f"; {len(admitted) - on_gpupack} on {DEFAULT_SCHEDULER}, spread" if on_gpupack < len(admitted) else ""
    header = f"== placement by the gpupack extender ({on_gpupack} GPU pods on {name}, filter then prioritize over HTTPS"
    print(f"{header}{elsewhere})")
    print("\n".join(placements["gpupack"].lines))
    base = running_busy(records)
    costs = {s: cost(records.values(), p.used, base + p.busy) for s, p in placements.items()}
    print("\n== the same pods under the default scheduler's spread scoring, and under gpupack")
    print("\n".join(summary(costs["gpupack"], costs["spread"])))
    print(
        "\n== measure first, verify after: a week of these nodes as `nvidia-smi --query-gpu=... -l 300` logged it,"
        " read by gpupack report (offline: no Prometheus, no API server)"
    )
    report_week(workdir, time.time() // 60 * 60, prices)
    return 0
