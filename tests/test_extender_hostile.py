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
