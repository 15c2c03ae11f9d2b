"""The extender against requests no scheduler sends: assumptions that would reserve what is not there, requests
too large to decode or to decide, and Pods whose fields have the wrong JSON type. Each is answered in band (or
harmlessly), with bounded work and memory, and never leaves the cache believing a node holds more than it has."""

from __future__ import annotations

import io
import logging
import tracemalloc
from typing import Any

import orjson
import pytest

import gpupack.extender.verbs as verbs
from gpupack.extender.app import Extender, ExtenderSettings, make_app
from gpupack.extender.wire import MAX_CANDIDATES, MAX_DECODED_BYTES, decoded_bytes_bound, parse_args
from gpupack.testing.nodes import realistic_node
from tests.conftest import recorded_text
from tests.extender_kit import (
    EXTENDER_FIXTURES,
    GO_FILTER_KEYS,
    extender_for,
    gpu_pod,
    recorded_args,
    recorded_nodes,
    registry,
)

FILTER = "000-filter-llm-infer-7b-abc12.json"
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


# 7. huge requests ------------------------------------------------------------------------------------------
def _names_body(names: list[str]) -> bytes:
    args = recorded_args(FILTER)
    args["NodeNames"] = names
    return orjson.dumps(args)


def _nodes_body(count: int) -> bytes:
    args = recorded_args("100-filter-embed-shared-1.json")
    node = args["Nodes"]["items"][0]
    args["Nodes"]["items"] = [{**node, "metadata": {**node["metadata"], "name": f"n{i}"}} for i in range(count)]
    return orjson.dumps(args)


@pytest.mark.parametrize(
    ("case", "body", "field"),
    [
        ("100,000 copies of one name", _names_body(["a100-od-1"] * 100_000), "NodeNames has 100000 nodes"),
        ("distinct names", _names_body([f"n{i}" for i in range(MAX_CANDIDATES + 1)]), "NodeNames has 15001 nodes"),
        ("a NodeList", _nodes_body(MAX_CANDIDATES + 1), "Nodes.items has 15001 nodes"),
    ],
)
async def test_more_candidates_than_the_cap_are_refused_in_band_before_any_decision(
    aiohttp_client: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    body: bytes,
    field: str,
) -> None:
    decisions = count_decisions(monkeypatch)
    client = await client_for(aiohttp_client, full_limits(extender_for(recorded_nodes())))
    with caplog.at_level(logging.WARNING, logger="gpupack.extender.app"):
        filtered = await post(client, "filter", body)
        prioritized = await post(client, "prioritize", body)
    assert filtered.status == prioritized.status == 200, case
    answer = await filtered.json()
    assert set(answer) == GO_FILTER_KEYS
    assert field in answer["Error"] and f"more than the {MAX_CANDIDATES}" in answer["Error"]
    assert await prioritized.json() == []
    assert decisions == []  # nothing was decided
    warnings = [r for r in caplog.records if r.name == "gpupack.extender.app"]
    assert [r.levelname for r in warnings] == ["WARNING", "WARNING"] and tracebacks(caplog) == []
    metrics = await (await client.get("/metrics")).text()
    for verb in ("filter", "prioritize"):
        assert f'gpupack_extender_bad_requests_total{{verb="{verb}"}} 1.0' in metrics


def _peak(work: Any) -> int:
    """The most memory (tracemalloc) allocated at once while `work()` runs."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_100000_copies_of_one_name_cost_bounded_memory(aiohttp_client: Any) -> None:
    """They took 2.2 s: each copy was decided again. Refused now, for little more than decoding them costs."""
    client = await client_for(aiohttp_client, full_limits(extender_for(recorded_nodes())))
    body = _names_body(["a100-od-1"] * 100_000)  # 1.2 MB
    decoding = _peak(lambda: orjson.loads(body))  # orjson reserves about 16 bytes per byte of JSON meanwhile
    tracemalloc.start()
    try:
        answer = await (await post(client, "filter", body)).json()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "more than the 15000" in answer["Error"]
    assert peak < decoding + 4 * len(body)  # and the body's copies in the client and the server


async def test_copies_of_one_name_up_to_the_cap_are_decided_once(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    decisions = count_decisions(monkeypatch)
    client = await client_for(aiohttp_client, full_limits(extender_for(recorded_nodes())))
    names = ["a100-od-1", "a100-od-2"] * (MAX_CANDIDATES // 2)
    answer = await (await post(client, "filter", _names_body(names))).json()
    assert answer["Error"] == "" and answer["NodeNames"] == names
    assert decisions == [2]  # one decision per distinct node, whatever the copies
    scores = await (await post(client, "prioritize", _names_body(names))).json()
    assert len(scores) == len(names) and decisions == [2]  # then from the cache


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("NodeNames of one-character names", b'{"Pod":{},"NodeNames":[' + b'"a",' * 2_100_000 + b'"a"]}'),
        (
            "a NodeList of minimal nodes",
            b'{"Pod":{},"Nodes":{"items":[' + b'{"metadata":{"name":"n"}},' * 700_000 + b'{"metadata":{"name":"n"}}]}}',
        ),
        ("a Pod field of empty objects", b'{"Pod":{"x":[' + b"{}," * 1_400_000 + b'{}]},"NodeNames":["a100-od-1"]}'),
    ],
)
async def test_a_body_that_would_decode_past_the_memory_bound_is_refused_undecoded(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch, case: str, body: bytes
) -> None:
    """A 57 MB body of 5 million names became 1.66 GB of objects; each of these would decode past 384 MiB."""
    decoded: list[int] = []
    loads = orjson.loads
    monkeypatch.setattr(orjson, "loads", lambda raw: decoded.append(len(raw)) or loads(raw))
    client = await client_for(aiohttp_client, full_limits(extender_for(recorded_nodes())))
    answer = await (await post(client, "filter", body)).json()
    assert f"more than the {MAX_DECODED_BYTES} the extender allows one request" in answer["Error"], case
    assert f"{len(body)}-byte body" in answer["Error"]
    assert len(body) not in decoded  # refused before decoding
    assert await (await post(client, "prioritize", body)).json() == []


def _shapes() -> list[tuple[str, bytes]]:
    chain = b'{"a":' * 100 + b'"x"' + b"}" * 100
    return [
        ("nested one-key objects", b"[" + b",".join([chain] * 300) + b"]"),
        ("empty objects", b"[" + b",".join([b"{}"] * 100_000) + b"]"),
        ("one-character strings", b"[" + b",".join([b'"a"'] * 100_000) + b"]"),
        ("numbers", b"[" + b",".join([b"123456", b"1.5e3"] * 50_000) + b"]"),
        ("distinct keys", b"{" + b",".join(b'"k%d":[0]' % i for i in range(100_000)) + b"}"),
        ("an emoji", '"😀'.encode() + b"a" * 500_000 + b'"'),
        ("an escaped emoji", b'["\\ud83d\\ude00' + b"a" * 500_000 + b'"]'),
        ("realistic nodes", b"[" + b",".join(orjson.dumps(realistic_node(i)) for i in range(200)) + b"]"),
        *[(path.name, recorded_text(path).encode()) for path in EXTENDER_FIXTURES],
    ]


@pytest.mark.parametrize(("case", "raw"), _shapes(), ids=[s[0] for s in _shapes()])
def test_the_estimate_bounds_what_decoding_allocates(case: str, raw: bytes) -> None:
    """The objects decoded, still alive after `orjson.loads` returns, never take more than the estimate."""
    tracemalloc.start()
    try:
        decoded = orjson.loads(raw)
        allocated = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert decoded is not None
    assert allocated <= decoded_bytes_bound(raw), case


def test_what_a_scheduler_sends_fits_the_limits() -> None:
    """500 names (the benchmark's requests), and a full NodeList of 5,000 realistic Node objects (25 MB)."""
    names = [f"gpu-node-{i:05d}.ec2.internal" for i in range(500)]
    assert parse_args(_names_body(names)).names == names
    nodes = [realistic_node(i) for i in range(5000)]
    body = orjson.dumps({"Pod": recorded_args(FILTER)["Pod"], "NodeNames": None, "Nodes": {"items": nodes}})
    assert decoded_bytes_bound(body) < MAX_DECODED_BYTES
    assert len(parse_args(body).names) == 5000


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


def test_a_huge_resources_shape_is_read_but_never_kept() -> None:
    """Pods whose resources carry a 20 MB value each took the extender past its 1 Gi limit: every shape was
    cached, up to 4,096 of them."""
    from gpupack.extender.demand import MAX_SHAPE_KEY, RequestsCache

    cache = RequestsCache()
    for i in range(5):
        padding = {f"example.com/pad{i}": "9" * (MAX_SHAPE_KEY + 1)}  # a resource the extender does not count
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", **padding}}}]}
        assert dict(cache.requests(spec, "nvidia.com/gpu.shared"))["cpu"] == 1000
    assert cache._cache == {}
    small = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    cache.requests(small, "nvidia.com/gpu.shared")
    assert len(cache._cache) == 1  # the usual shapes still are


@pytest.mark.parametrize("field", ["uid", "name"])
async def test_a_pod_key_no_kubernetes_pod_has_is_refused(aiohttp_client: Any, field: str) -> None:
    """A 20 MB uid was held as an assumption for 30 s; twenty of them took 339 MB."""
    client = await client_for(aiohttp_client)
    args = recorded_args(FILTER)
    args["Pod"]["metadata"].pop("uid", None)  # the key is the uid, else namespace/name
    args["Pod"]["metadata"][field] = "u" * 10_000
    answer = await (await post(client, "filter", orjson.dumps(args))).json()
    assert "no Kubernetes pod's" in answer["Error"]
