"""`gpupack demo` (`make run`): the webhook and the extender on localhost over TLS, fed an embedded cluster.

Every submitted pod goes through the webhook as an AdmissionReview, then, as kube-scheduler would send it,
through the extender's `/filter` and `/prioritize`, and is bound to the best node. The same pods are placed
a second time by an extender scoring like the default scheduler (`spread`), to show what gpupack saves.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client import CollectorRegistry

from demo.cluster import NODES, RUNNING, SUBMITTED, Submitted, exporters, running_pods
from demo.report import Cost, cost
from demo.scheduler import feasible, final_scores, preferred_affinity
from extender.app import EXTENDER, Extender
from extender.dcgm_text import exposition
from extender.demand import pod_key, pod_requests
from extender.inventory import NodeRecord, node_from_json
from extender.service import ExtenderConfig
from extender.service import build_app as build_extender
from gpupack.cluster import ClusterFacts
from gpupack.kube import facts_from_lists
from gpupack.policy import parse_policy
from gpupack.server import ServeOptions, start_server
from webhook.demo import describe, ensure_certs, review
from webhook.patches import apply_patch
from webhook.service import WebhookConfig
from webhook.service import build_app as build_webhook


class NodesReader:
    """The webhook's view of the embedded cluster: which MIG profiles the nodes advertise."""

    def read(self) -> ClusterFacts:
        return facts_from_lists(None, {"items": NODES})


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
    url: str,
    extender: Extender,
    scoring: str,
    pods: list[tuple[dict[str, Any], float]],
    records: dict[str, NodeRecord],
) -> Placement:
    """Schedule `pods` in order: kube-scheduler's own filters, then the extender's filter and scores."""
    result = Placement(scoring, {}, 0.0)
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
        async with session.post(f"{url}/filter", json=args) as resp:
            filtered = await resp.json()
        passed: list[str] = filtered["NodeNames"] or []
        if not passed:
            reasons = {**filtered["FailedNodes"], **filtered["FailedAndUnresolvableNodes"]}
            result.unplaced.append(name)
            result.lines.append(f"   {name:<14} unschedulable: {reasons or 'no node passes the scheduler filters'}")
            continue
        scores = {passed[0]: 0}
        if len(passed) > 1:  # kube-scheduler calls prioritize only with more than one feasible node
            async with session.post(f"{url}/prioritize", json={**args, "NodeNames": passed}) as resp:
                scores = {e["Host"]: e["Score"] for e in await resp.json()}
        totals = final_scores(scores, {n: preferred_affinity(pod, labels[n]) for n in passed})
        best = max(passed, key=lambda n: totals.get(n, 0))
        result.add(best, requests)
        # The binding, as the extender's pod watch would deliver it moments later.
        extender.state.upsert_pod(pod_key(pod["metadata"]), best, tuple(requests.items()))
        gpu = next((f"{n} {r}" for r, n in requests.items() if r.startswith("nvidia.com/")), "")
        record = records[best]
        result.busy += busy * sum(n * record.shares.get(r, 0.0) for r, n in requests.items())
        ranked = " ".join(f"{n}={s}" for n, s in sorted(scores.items(), key=lambda x: -x[1])[:4])
        result.lines.append(f"   {name:<14} -> {best:<12} {gpu:<28} scores: {ranked}")
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


async def run_demo(workdir: Path) -> int:
    """Run the whole demo; returns the exit code."""
    cert, key, ca = ensure_certs(workdir / "certs")
    nodes_file, pods_file, dcgm_file = write_cluster(workdir / "cluster")
    policies = {}
    for scoring in ("gpupack", "spread"):
        policies[scoring] = workdir / f"policy-{scoring}.yaml"
        policies[scoring].write_text(f"extender:\n  scoring: {scoring}\n")
    policy = parse_policy(b"")
    records = {n["metadata"]["name"]: node_from_json(n, policy) for n in NODES}
    webhook = build_webhook(WebhookConfig(None, ServeOptions()), CollectorRegistry(), reader=NodesReader())
    client_tls = ssl.create_default_context(cafile=str(ca))
    connector = aiohttp.TCPConnector(ssl=client_tls)
    async with aiohttp.ClientSession(connector=connector) as session, serving(webhook, cert, key) as hook_url:
        print(f"gpupack webhook on {hook_url} (built-in policy), embedded cluster: {len(NODES)} GPU nodes\n")
        admitted: list[tuple[dict[str, Any], float]] = []
        for item in SUBMITTED:
            response, pod = await admit(session, hook_url, item)
            print("\n".join(describe(item.title or "another replica", item.pod, response)) + "\n")
            if response["allowed"] and any(r.startswith("nvidia.com/") for r in pod_requests(pod["spec"])):
                admitted.append((pod, item.busy))
        placements: dict[str, Placement] = {}
        for scoring, policy_file in policies.items():
            config = ExtenderConfig(
                policy_file, ServeOptions(), nodes_file=nodes_file, pods_file=pods_file, metrics_file=dcgm_file
            )
            app = build_extender(config, CollectorRegistry())
            async with serving(app, cert, key) as ext_url:
                placements[scoring] = await place(session, ext_url, app[EXTENDER], scoring, admitted, records)
    print(f"== placement by the gpupack extender ({len(admitted)} GPU pods, filter then prioritize over HTTPS)")
    print("\n".join(placements["gpupack"].lines))
    base = running_busy(records)
    costs = {s: cost(records.values(), p.used, base + p.busy) for s, p in placements.items()}
    print("\n== the same pods under the default scheduler's spread scoring, and under gpupack")
    print("\n".join(summary(costs["gpupack"], costs["spread"])))
    return 0
