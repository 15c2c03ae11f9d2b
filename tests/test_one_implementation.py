"""The extender and the simulator use one implementation of placement: for a sample of states from the synthetic
day, the extender's `/prioritize` over HTTP ranks the same node first as the simulator does, with the same scores."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extender.app import Extender, ExtenderSettings, make_app
from extender.live import LiveMetrics, NodeUtils
from extender.verbs import View, snapshot, verdict
from gpupack.policy_store import LoadedPolicy, PolicyStore
from simulator.day import DEFAULT_SCENARIO, _Day, load_scenario
from simulator.day_cluster import job_arrivals, replica_pod
from webhook.mutate import plan
from webhook.patches import apply_patch

SAMPLE_STEPS = (45, 120, 240, 400)


def probe_pods(day: _Day) -> list[dict[str, Any]]:
    """One pod of every inference Deployment and of the first training and batch jobs, as admitted."""
    raws = [replica_pod(w, 99_999) for w in day.scenario.inference]
    seen: set[str] = set()
    for job in job_arrivals(day.scenario):
        stream = job.pod["metadata"]["name"].rsplit("-", 1)[0]
        if stream not in seen:
            seen.add(stream)
            raws.append(job.pod)
    pods = []
    for raw in raws:
        decision = plan(raw, raw["metadata"]["namespace"], day.context)
        assert decision.allowed
        pods.append(apply_patch(raw, decision.ops))
    return pods


def at_wall_clock(live: LiveMetrics, wall: float) -> LiveMetrics:
    """The day's live data (stamped on the simulation clock) as fresh samples on the wall clock."""
    summary = {n: NodeUtils(u.utils, wall) for n, u in live.summary.items()}
    return LiveMetrics({}, wall, summary, wall, live.serial)


@pytest.mark.parametrize("scoring", ["gpupack", "spread"])
async def test_prioritize_ranks_the_same_node_first_as_the_simulator(aiohttp_client: Any, scoring: str) -> None:
    scenario = load_scenario(DEFAULT_SCENARIO).with_changes(scale=0.5, hours=8, warmup_hours=0)
    day = _Day(scenario, scoring)  # type: ignore[arg-type]
    pods = probe_pods(day)
    compared = 0
    for step in range(max(SAMPLE_STEPS) + 1):
        day.finish_jobs(step)
        day.scale_deployments(step)
        day.arrive_jobs(step)
        day.schedule(step)
        if step not in SAMPLE_STEPS:
            continue
        wall = time.time()
        live = at_wall_clock(day.live(step), wall)
        view = View(day.state, live, day.policy)
        extender = Extender(
            PolicyStore(None, LoadedPolicy(day.policy, "day")), copy.deepcopy(day.state), ExtenderSettings(), live
        )
        client = await aiohttp_client(make_app(extender, CollectorRegistry()))
        for pod in pods:
            ours = {}
            day_pod = day.sim_pod(pod, 0.0, 0, "probe", None)
            for name, record in day.records.items():
                if not day.statically_ok(day_pod, name):
                    continue
                found = verdict(day_pod.demand, snapshot(record, view, wall, wall), day.policy)
                if found.rejection is None:
                    ours[name] = found.score
            if len(ours) < 2:
                continue
            extender.state = copy.deepcopy(day.state)  # each probe alone: no assumption left by the previous one
            args = {"Pod": pod, "Nodes": None, "NodeNames": list(ours)}
            theirs = {e["Host"]: e["Score"] for e in await (await client.post("/prioritize", json=args)).json()}
            assert theirs == ours, f"step {step}, pod {pod['metadata']['name']}"
            assert max(theirs, key=lambda n: theirs[n]) == max(ours, key=lambda n: ours[n])
            compared += 1
        await client.close()
    assert compared >= 12  # every sample state contributed rankings
