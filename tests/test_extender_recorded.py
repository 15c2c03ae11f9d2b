"""Every recorded kube-scheduler request, answered in the form and with the field names kube-scheduler reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gpupack.extender.app import make_app
from gpupack.extender.demand import pod_key
from tests.conftest import recorded_text
from tests.extender_kit import EXTENDER_FIXTURES, GO_FILTER_KEYS, extender_for, recorded_args, recorded_nodes, registry

Client = Any


async def client_for(aiohttp_client: Any, doc: str = "") -> TestClient:  # type: ignore[type-arg]
    extender = extender_for(recorded_nodes(), doc=doc)
    return await aiohttp_client(make_app(extender, registry()))


@pytest.mark.parametrize("path", EXTENDER_FIXTURES, ids=[p.name for p in EXTENDER_FIXTURES])
async def test_recorded_request_gets_an_answer_kube_scheduler_reads(aiohttp_client: Any, path: Path) -> None:
    client = await client_for(aiohttp_client)
    args = json.loads(recorded_text(path))
    verb = "filter" if "-filter-" in path.name else "prioritize"
    response = await client.post(f"/{verb}", data=recorded_text(path))
    assert response.status == 200
    assert response.content_type == "application/json"
    body = await response.json()
    sent = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    if verb == "prioritize":
        assert [entry["Host"] for entry in body] == sent
        assert all(set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10 for entry in body)
        return
    assert set(body) == GO_FILTER_KEYS
    assert body["Error"] == ""
    if args["NodeNames"] is not None:  # cache-capable form: answer with names, Nodes null
        assert body["Nodes"] is None
        assert body["NodeNames"] == sent  # the scheduler already dropped nodes that cannot fit
    else:  # full form: answer with the Node objects themselves, NodeNames null
        assert body["NodeNames"] is None
        assert body["Nodes"]["items"] == args["Nodes"]["items"]
    assert body["FailedNodes"] == {} and body["FailedAndUnresolvableNodes"] == {}


async def test_second_pod_packs_onto_the_node_assumed_for_the_first(aiohttp_client: Any) -> None:
    """llm-infer-7b is ranked first on a100-od-1 (equal empty nodes: the first); before the watch shows it bound,
    notebook-gpu must still see that node as in use and prefer it, so the other A100 node stays empty."""
    client = await client_for(aiohttp_client)
    first = await (
        await client.post("/prioritize", json=recorded_args("001-prioritize-llm-infer-7b-abc12.json"))
    ).json()
    assert [e["Score"] for e in first] == [10, 9]  # both empty: the first, where it is assumed, alone at the top
    second = await (await client.post("/prioritize", json=recorded_args("006-prioritize-notebook-gpu.json"))).json()
    scores = {e["Host"]: e["Score"] for e in second}
    assert scores["a100-od-1"] > scores["a100-od-2"]
    state = await (await client.get("/state")).json()
    assert state["assumed"] == 2
    assert state["nodes"]["a100-od-1"]["free"]["nvidia.com/mig-2g.10gb"] == 7


async def test_single_feasible_node_is_assumed_by_filter(aiohttp_client: Any) -> None:
    """kube-scheduler skips prioritize when one node passes (ddp-worker-0): the filter assumes it instead."""
    client = await client_for(aiohttp_client)
    body = await (await client.post("/filter", json=recorded_args("004-filter-ddp-worker-0.json"))).json()
    assert body["NodeNames"] == ["h100-spot-1"]
    state = await (await client.get("/state")).json()
    assert state["nodes"]["h100-spot-1"]["free"]["nvidia.com/gpu"] == 4


async def test_inference_is_filtered_off_spot_nodes_as_unresolvable(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    args = recorded_args("000-filter-llm-infer-7b-abc12.json")
    args["NodeNames"] = ["a100-od-1", "h100-spot-1", "t4-shared-1"]
    body = await (await client.post("/filter", json=args)).json()
    assert body["NodeNames"] == ["a100-od-1"]
    assert "spot" in body["FailedAndUnresolvableNodes"]["h100-spot-1"]
    assert "nvidia.com/mig-2g.10gb" in body["FailedAndUnresolvableNodes"]["t4-shared-1"]
    assert body["FailedNodes"] == {}


async def test_full_nodes_form_uses_the_nodes_sent(aiohttp_client: Any) -> None:
    """With nodeCacheCapable false (and in Cluster Autoscaler's simulation) the scheduler's nodes win, even
    ones the watch cache has never seen."""
    client = await client_for(aiohttp_client)
    args = recorded_args("100-filter-embed-shared-1.json")
    unknown = json.loads(json.dumps(args["Nodes"]["items"][0]))
    unknown["metadata"]["name"] = "t4-new"
    unknown["status"]["allocatable"]["nvidia.com/gpu.shared"] = "0"
    args["Nodes"]["items"].append(unknown)
    body = await (await client.post("/filter", json=args)).json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["t4-shared-1", "t4-shared-2"]
    assert "t4-new" in body["FailedAndUnresolvableNodes"]


async def test_go_decoder_key_case_is_accepted(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    args = recorded_args("000-filter-llm-infer-7b-abc12.json")
    lowered = {"pod": args["Pod"], "nodenames": args["NodeNames"], "nodes": None}
    body = await (await client.post("/filter", json=lowered)).json()
    assert body["NodeNames"] == args["NodeNames"] and body["Error"] == ""


async def test_asking_again_about_the_same_pod_keeps_its_assumption_and_voids_nothing(aiohttp_client: Any) -> None:
    """kube-scheduler retries: the same pod prioritized again stays assumed on the same node, and only the
    assumption's expiry moves, so no cached decision is dropped."""
    extender = extender_for(recorded_nodes())
    client = await aiohttp_client(make_app(extender, registry()))
    args = recorded_args("001-prioritize-llm-infer-7b-abc12.json")
    key = pod_key(args["Pod"]["metadata"])
    await client.post("/prioritize", json=args)
    node, changes = extender.state.assumed_node(key), extender.state.change_count
    assert node is not None
    for _ in range(3):
        await client.post("/prioritize", json=args)
        assert extender.state.assumed_node(key) == node
    assert extender.state.change_count == changes and extender.state.assumed_count() == 1


@pytest.mark.parametrize("scoring", ["gpupack", "spread"])
async def test_a_retried_pod_is_not_crowded_out_by_its_own_assumption(aiohttp_client: Any, scoring: str) -> None:
    """ddp-worker-0, asking for all 8 GPUs of h100-spot-1, is assumed there by the filter. When kube-scheduler asks
    again (the bind failed, or the pod was requeued), the node must still pass for it and keep its assumption:
    counting the pod against itself would leave it unschedulable until the assumption expires. Another pod of
    the same shape still sees the node full."""
    extender = extender_for(recorded_nodes(), doc=f"extender: {{scoring: {scoring}}}")
    client = await aiohttp_client(make_app(extender, registry()))
    args = recorded_args("004-filter-ddp-worker-0.json")
    resources = args["Pod"]["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = "8"
    key = pod_key(args["Pod"]["metadata"])
    answers = []
    for _ in range(3):
        body = await (await client.post("/filter", json=args)).json()
        assert body["NodeNames"] == ["h100-spot-1"] and body["FailedNodes"] == {}
        assert extender.state.assumed_node(key) == "h100-spot-1"
        answers.append(await (await client.post("/prioritize", json=args)).json())
    assert answers[0] == answers[1] == answers[2]  # the same node state each time: the pod's own is left out
    assert answers[0] == [{"Host": "h100-spot-1", "Score": 10 if scoring == "gpupack" else 6}]
    state = await (await client.get("/state")).json()
    assert state["nodes"]["h100-spot-1"]["free"]["nvidia.com/gpu"] == 0
    other = json.loads(json.dumps(args))
    other["Pod"]["metadata"].update(name="ddp-worker-1", uid="uid-ddp-worker-1")
    body = await (await client.post("/filter", json=other)).json()
    assert body["NodeNames"] == [] and "h100-spot-1" in body["FailedNodes"]
