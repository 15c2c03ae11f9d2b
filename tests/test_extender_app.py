"""The extender's HTTP layer: bad input answered in band (never a 500), readiness, /state, /metrics, policy reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupack.core.policy_store import PolicyStore
from gpupack.extender.app import make_app
from gpupack.extender.state import ClusterState
from tests.extender_kit import (
    GO_FILTER_KEYS,
    T4_SHARED,
    extender_for,
    gpu_pod,
    node,
    recorded_args,
    recorded_nodes,
    registry,
)

BAD_BODIES = [
    ("not JSON", b"{nope", "not JSON"),
    ("a JSON array", b"[]", "must be a JSON object"),
    ("no Pod", b'{"NodeNames": ["a"]}', "Pod"),
    ("Pod of the wrong type", b'{"Pod": "x", "NodeNames": ["a"]}', "Pod"),
    ("NodeNames of the wrong type", b'{"Pod": {}, "NodeNames": "a"}', "NodeNames"),
    ("a node name that is not a string", b'{"Pod": {}, "NodeNames": ["a", 7]}', "NodeNames"),
    ("a null node name", b'{"Pod": {}, "NodeNames": [null]}', "NodeNames"),
    ("neither form", b'{"Pod": {}, "NodeNames": null, "Nodes": null}', "neither"),
    ("Nodes without items", b'{"Pod": {}, "Nodes": {"items": 3}}', "items"),
    ("a node without a name", b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "metadata.name"),
    (
        "an unreadable request",
        b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": ["a"]}',
        "cpu",
    ),
]


@pytest.mark.parametrize(("case", "raw", "named"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
async def test_bad_filter_request_gets_an_error_in_band(aiohttp_client: Any, case: str, raw: bytes, named: str) -> None:
    client = await aiohttp_client(make_app(extender_for(recorded_nodes()), registry()))
    response = await client.post("/filter", data=raw)
    assert response.status == 200, case
    body = await response.json()
    assert set(body) == GO_FILTER_KEYS
    assert named in body["Error"], body["Error"]
    prioritize = await client.post("/prioritize", data=raw)
    assert prioritize.status == 200 and await prioritize.json() == []
    metrics = await (await client.get("/metrics")).text()
    assert 'gpupack_extender_bad_requests_total{verb="filter"} 1.0' in metrics


async def test_oversized_body_is_refused_in_band(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_app(extender_for(recorded_nodes()), registry()))
    args = recorded_args("000-filter-llm-infer-7b-abc12.json")
    args["NodeNames"] = [f"node-{i:06d}" for i in range(30_000)]  # about 400 KiB over a 256 KiB limit
    response = await client.post("/filter", json=args)
    assert response.status == 200
    assert "exceeds" in (await response.json())["Error"]


async def test_not_ready_until_the_first_list(aiohttp_client: Any) -> None:
    extender = extender_for([])
    extender.state = ClusterState()
    client = await aiohttp_client(make_app(extender, registry()))
    assert (await client.get("/readyz")).status == 503
    extender.state.synced = True
    assert (await client.get("/readyz")).status == 200


async def test_state_and_metrics_describe_the_cache(aiohttp_client: Any) -> None:
    pods = [gpu_pod("nvidia.com/gpu.shared", 3, name="a")]
    pods[0]["spec"]["nodeName"] = "t4"
    client = await aiohttp_client(
        make_app(extender_for([node("t4", {"nvidia.com/gpu.shared": 16}, T4_SHARED)], pods), registry())
    )
    state = await (await client.get("/state")).json()
    t4 = state["nodes"]["t4"]
    assert t4["free"] == {"nvidia.com/gpu.shared": 13}
    assert t4["gpus"] == 4 and t4["gpuUsed"] == 0.75
    metrics = await (await client.get("/metrics")).text()
    assert "gpupack_extender_nodes_cached 1.0" in metrics
    assert "gpupack_extender_pods_cached 1.0" in metrics
    assert "gpupack_extender_metrics_stale 1.0" in metrics  # no live source at all


async def test_filter_reasons_are_counted(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_app(extender_for(recorded_nodes()), registry()))
    args = recorded_args("000-filter-llm-infer-7b-abc12.json")
    args["NodeNames"] = ["a100-od-1", "h100-spot-1", "t4-shared-1"]
    await client.post("/filter", json=args)
    metrics = await (await client.get("/metrics")).text()
    assert 'gpupack_extender_filtered_nodes_total{reason="spot"} 1.0' in metrics
    assert 'gpupack_extender_filtered_nodes_total{reason="no-resource"} 1.0' in metrics
    assert 'gpupack_extender_request_duration_seconds_count{verb="filter"} 1.0' in metrics


async def test_scoring_policy_changes_without_a_restart(aiohttp_client: Any, tmp_path: Path) -> None:
    """Reloading the policy file switches gpupack (ranks) -> spread (LeastAllocated scores)."""
    path = tmp_path / "policy.yaml"
    path.write_text("")
    extender = extender_for(recorded_nodes())
    extender.policy = PolicyStore(path)
    client = await aiohttp_client(make_app(extender, registry()))
    args = recorded_args("001-prioritize-llm-infer-7b-abc12.json")
    before = await (await client.post("/prioritize", json=args)).json()
    path.write_text("extender:\n  scoring: spread\n")
    assert extender.policy.reload()
    after = await (await client.post("/prioritize", json=args)).json()
    # two equal empty nodes: the first, where the pod is assumed, alone at the top (`verbs.sole_best`)
    assert [e["Score"] for e in before] == [10, 9]
    # spread: 1 - mean used fraction of cpu, memory and the MIG slice; again the assumed node alone at the top
    assert [e["Score"] for e in after] == [9, 8]


async def test_extender_serves_the_verbs_over_tls(tls_dir: Path) -> None:
    """`gpupack extender --cert-file --key-file`: a real TLS connection trusting the generated CA."""
    import ssl

    import aiohttp

    from gpupack.core.server import ServeOptions, start_server

    app = make_app(extender_for(recorded_nodes()), registry())
    options = ServeOptions("127.0.0.1", 0, tls_dir / "tls.crt", tls_dir / "tls.key")
    serving = await start_server(app, options)
    try:
        context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            url = f"https://127.0.0.1:{serving.port}/filter"
            async with session.post(url, json=recorded_args("000-filter-llm-infer-7b-abc12.json")) as resp:
                body = await resp.json()
        assert resp.status == 200 and body["NodeNames"] == ["a100-od-1", "a100-od-2"]
    finally:
        await serving.stop()
