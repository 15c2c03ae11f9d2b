"""The demo's kube-scheduler: a pod goes through the extender of the scheduler it names, so only pods the webhook
routed to gpupack-scheduler are filtered and scored by the gpupack extender; the others are spread, as the
default scheduler would, and every extender sees every binding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from gpupack.core.admitted import admitted_pod
from gpupack.core.kube import facts_from_lists
from gpupack.core.lease import LIVE, SchedulerStatus
from gpupack.core.policy import parse_policy
from gpupack.core.server import ServeOptions
from gpupack.demo.cluster import NODES
from gpupack.demo.run import Scheduler, place, write_cluster
from gpupack.extender.app import EXTENDER
from gpupack.extender.inventory import node_from_json
from gpupack.extender.service import ExtenderConfig, build_app
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch
from tests.conftest import W, context

EXPIRED = SchedulerStatus(False, "expired", "lease expired 40s ago")


def admitted(name: str, status: SchedulerStatus) -> dict[str, Any]:
    pod = admitted_pod(name, {W + "workload": "inference", W + "gpu-memory": "8Gi"})
    base = context()
    facts = facts_from_lists(None, {"items": NODES})  # what the embedded A100s advertise: 2g.10gb for 8Gi
    decision = plan(pod, "ml-serving", MutationContext(base.policy, base.version, facts, False, status))
    return apply_patch(pod, decision.ops)


def filters(registry: CollectorRegistry) -> float:
    count = registry.get_sample_value("gpupack_extender_request_duration_seconds_count", {"verb": "filter"})
    return count or 0.0


async def test_only_pods_routed_to_the_gpupack_scheduler_go_through_the_gpupack_extender(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    nodes, pods, dcgm = write_cluster(tmp_path / "cluster")
    registries = {"gpupack": CollectorRegistry(), "spread": CollectorRegistry()}
    servers = {}
    for scoring, registry in registries.items():
        policy = tmp_path / f"{scoring}.yaml"
        policy.write_text(f"extender: {{scoring: {scoring}}}\n")
        app = build_app(
            ExtenderConfig(policy, ServeOptions(), nodes_file=nodes, pods_file=pods, metrics_file=dcgm), registry
        )
        servers[scoring] = (await aiohttp_server(app), app)
    gpupack, spread = (Scheduler(f"http://127.0.0.1:{s.port}", app[EXTENDER]) for s, app in servers.values())
    routed, unrouted = admitted("llm-7b", LIVE), admitted("llm-7b-b", EXPIRED)
    assert (routed["spec"]["schedulerName"], unrouted["spec"]["schedulerName"]) == (
        "gpupack-scheduler",
        "default-scheduler",
    )
    records = {n["metadata"]["name"]: node_from_json(n, parse_policy(b"")) for n in NODES}
    async with aiohttp.ClientSession() as session:
        placement = await place(
            session, {"gpupack-scheduler": gpupack}, spread, "gpupack", [(routed, 0.3), (unrouted, 0.3)], records
        )
    assert (filters(registries["gpupack"]), filters(registries["spread"])) == (1.0, 1.0)
    assert placement.unplaced == [] and len(placement.lines) == 2
    assert not placement.lines[0].endswith("(default-scheduler)") and placement.lines[1].endswith("(default-scheduler)")
    for scheduler in (gpupack, spread):  # each extender's watch sees both bindings
        assert {"ml-serving/llm-7b", "ml-serving/llm-7b-b"} <= set(scheduler.extender.state.pods)
