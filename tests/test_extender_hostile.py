"""The extender against requests no scheduler sends: assumptions that would reserve what is not there, requests
too large to decode or to decide, and Pods whose fields have the wrong JSON type. Each is answered in band (or
harmlessly), with bounded work and memory, and never leaves the cache believing a node holds more than it has."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

import extender.verbs as verbs
from extender.app import Extender, ExtenderSettings, make_app
from tests.extender_kit import (
    extender_for,
    gpu_pod,
    recorded_args,
    recorded_nodes,
    registry,
)

FILTER = "000-filter-llm-infer-7b-abc12.json"
PRIORITIZE = "001-prioritize-llm-infer-7b-abc12.json"
SHARED, GPU = "nvidia.com/gpu.shared", "nvidia.com/gpu"


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


def pod_args(resource: str, count: int, name: str, nodes: list[str]) -> dict[str, Any]:
    """ExtenderArgs for a training pod asking `count` of `resource` (training: spot nodes are allowed)."""
    return {"Pod": gpu_pod(resource, count, "training", name=name), "NodeNames": nodes, "Nodes": None}


async def client_for(aiohttp_client: Any, extender: Extender | None = None) -> Any:
    return await aiohttp_client(make_app(extender or extender_for(recorded_nodes()), registry()))


def full_limits(extender: Extender) -> Extender:
    """The extender with the production limits (the kit's body limit is 256 KiB)."""
    extender.settings = ExtenderSettings()
    return extender


async def post(client: Any, verb: str, body: bytes) -> Any:
    """POST raw bytes (a file-like body: aiohttp warns about bytes over 1 MiB)."""
    return await client.post(f"/{verb}", data=io.BytesIO(body))


def count_decisions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many node snapshots each call of the pure decision (`verbs.judge`) receives."""
    sizes: list[int] = []
    judge = verbs.judge

    def counting(demand: Any, snaps: list[Any], policy: Any, book: Any) -> Any:
        sizes.append(len(snaps))
        return judge(demand, snaps, policy, book)

    monkeypatch.setattr(verbs, "judge", counting)
    return sizes


# 6. capacity reservation ----------------------------------------------------------------------------------
async def test_prioritize_on_a_node_the_pod_does_not_fit_reserves_nothing(aiohttp_client: Any) -> None:
    """The report: 2,100 replicas asked of a 16-replica node were assumed there, and /state showed -2084."""
    extender = extender_for(recorded_nodes())
    client = await client_for(aiohttp_client, extender)
    answer = await (await client.post("/prioritize", json=pod_args(SHARED, 2100, "huge", ["t4-shared-1"]))).json()
    assert [e["Host"] for e in answer] == ["t4-shared-1"]  # still scored: kube-scheduler asked
    assert extender.state.assumed_count() == 0
    state = await (await client.get("/state")).json()
    assert state["nodes"]["t4-shared-1"]["free"] == {SHARED: 16}


async def test_fresh_uids_reserve_no_more_than_a_node_has(aiohttp_client: Any) -> None:
    """Each prioritize with a new uid assumed a 4-GPU pod on the 8-GPU node, the third and later past its
    capacity. Two fit and are assumed (telling them from real pods is the transport's job); no more."""
    extender = extender_for(recorded_nodes())
    client = await client_for(aiohttp_client, extender)
    for i in range(4):
        await client.post("/prioritize", json=pod_args(GPU, 4, f"fake-{i}", ["h100-spot-1"]))
    assert extender.state.assumed_count() == 2
    h100 = (await (await client.get("/state")).json())["nodes"]["h100-spot-1"]
    assert h100["free"] == {GPU: 0} and h100["requested"] == {GPU: 8}


async def test_the_assumption_goes_to_the_best_node_where_the_pod_fits(aiohttp_client: Any) -> None:
    """12 replicas fill most of one T4 node; the next 12-replica pod fits only on the other one. gpupack ranks
    the started node first (it packs), but the pod cannot be assumed there."""
    extender = extender_for(recorded_nodes())
    client = await client_for(aiohttp_client, extender)
    both = ["t4-shared-1", "t4-shared-2"]
    await client.post("/prioritize", json=pod_args(SHARED, 12, "first", both))
    first = extender.state.assumed_node("uid-first")
    assert first in both
    await client.post("/prioritize", json=pod_args(SHARED, 12, "second", both))
    assert extender.state.assumed_node("uid-second") == next(n for n in both if n != first)
    nodes = (await (await client.get("/state")).json())["nodes"]
    assert nodes["t4-shared-1"]["free"] == nodes["t4-shared-2"]["free"] == {SHARED: 4}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_node_the_cache_does_not_know_is_never_assumed(aiohttp_client: Any, verb: str) -> None:
    """An unknown name passes the filter (the scheduler checked it) but there is nothing to count it against."""
    extender = extender_for(recorded_nodes())
    client = await client_for(aiohttp_client, extender)
    response = await client.post(f"/{verb}", json=pod_args(GPU, 4, "p", ["ghost"]))
    assert response.status == 200
    assert extender.state.assumed_count() == 0


async def test_a_retried_pod_filling_a_node_keeps_it_and_no_other_pod_is_assumed_there(aiohttp_client: Any) -> None:
    extender = extender_for(recorded_nodes())
    client = await client_for(aiohttp_client, extender)
    args = pod_args(GPU, 8, "whole", ["h100-spot-1"])
    for _ in range(3):  # kube-scheduler asking again: the pod's own assumption is not counted against it
        await client.post("/prioritize", json=args)
        assert extender.state.assumed_node("uid-whole") == "h100-spot-1"
    await client.post("/prioritize", json=pod_args(GPU, 1, "other", ["h100-spot-1"]))
    assert extender.state.assumed_node("uid-other") is None
    assert extender.state.assumed_count() == 1


async def test_state_shows_bound_pods_above_allocatable_without_negative_free(aiohttp_client: Any) -> None:
    """A device plugin that lowered allocatable under running pods: free is 0 and what is requested is shown."""
    pods = [gpu_pod(SHARED, 10, name=f"bound-{i}") for i in range(2)]
    for pod in pods:
        pod["spec"]["nodeName"] = "t4-shared-1"
    client = await client_for(aiohttp_client, extender_for(recorded_nodes(), pods))
    t4 = (await (await client.get("/state")).json())["nodes"]["t4-shared-1"]
    assert t4["allocatable"] == {SHARED: 16}
    assert t4["free"] == {SHARED: 0} and t4["requested"] == {SHARED: 20}


# 11. malformed pods ----------------------------------------------------------------------------------------
def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


CONTAINER = ("Pod", "spec", "containers", 0)
WRONG_TYPES = [
    (("Pod", "spec"), [], "Pod.spec must be an object, not an array"),
    (("Pod", "metadata"), [], "Pod.metadata must be an object, not an array"),
    (("Pod", "spec", "containers"), ["x"], "spec.containers[0] must be an object, not a string"),
    (("Pod", "spec", "containers"), {}, "spec.containers must be a list, not an object"),
    (("Pod", "spec", "containers"), "", "spec.containers must be a list, not a string"),
    (("Pod", "spec", "initContainers"), {}, "spec.initContainers must be a list, not an object"),
    (("Pod", "spec", "initContainers"), [0], "spec.initContainers[0] must be an object, not a number"),
    ((*CONTAINER, "resources"), [], "spec.containers[0].resources must be an object, not an array"),
    ((*CONTAINER, "resources", "requests"), [], "spec.containers[0].resources.requests must be an object"),
    ((*CONTAINER, "resources", "limits"), "", "spec.containers[0].resources.limits must be an object, not a string"),
    (("Pod", "metadata", "annotations"), [], ".annotations is an array"),
    (("Pod", "metadata", "labels"), [], ".labels is an array"),
    (("Pod", "metadata", "ownerReferences"), {}, ".ownerReferences is an object"),
]


@pytest.mark.parametrize(("path", "value", "named"), WRONG_TYPES, ids=[m for _, _, m in WRONG_TYPES])
async def test_a_falsy_value_of_the_wrong_type_is_refused_naming_the_field(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture, path: tuple[Any, ...], value: Any, named: str
) -> None:
    """`spec: []`, `containers: ["x"]` or `resources: []` were read as a CPU-only pod. Asked after a valid pod
    whose requests share the cache's key (no containers, or no resources), so the cache cannot answer for it."""
    client = await client_for(aiohttp_client)
    for valid_path, valid in ((("Pod", "spec", "containers"), []), ((*CONTAINER, "resources"), {})):
        args = recorded_args(FILTER)
        _set(args, valid_path, valid)
        assert (await (await client.post("/filter", json=args)).json())["Error"] == ""
    args = recorded_args(FILTER)
    _set(args, path, value)
    for verb in ("filter", "prioritize"):
        response = await client.post(f"/{verb}", data=orjson.dumps(args))
        assert response.status == 200
        body = await response.json()
        if verb == "filter":
            assert named in body["Error"], body["Error"]
        else:
            assert body == []
    assert tracebacks(caplog) == []


RIGHT_TYPES = [
    (("Pod", "spec", "initContainers"), []),
    (("Pod", "spec", "initContainers"), None),
    (("Pod", "spec", "containers"), []),
    ((*CONTAINER, "resources"), {}),
    ((*CONTAINER, "resources"), None),
    ((*CONTAINER, "resources", "requests"), {}),
    ((*CONTAINER, "resources", "limits"), None),
    (("Pod", "metadata", "labels"), {}),
    (("Pod", "metadata", "annotations"), None),
    (("Pod", "metadata", "ownerReferences"), []),
]


@pytest.mark.parametrize(("path", "value"), RIGHT_TYPES, ids=[f"{p[-1]}={v!r}" for p, v in RIGHT_TYPES])
async def test_an_empty_value_of_the_right_type_is_valid(
    aiohttp_client: Any, path: tuple[Any, ...], value: Any
) -> None:
    client = await client_for(aiohttp_client)
    args = recorded_args(FILTER)
    _set(args, path, value)
    body = await (await client.post("/filter", json=args)).json()
    assert body["Error"] == "" and body["NodeNames"] == args["NodeNames"]
