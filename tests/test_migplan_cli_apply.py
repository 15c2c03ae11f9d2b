"""`gpupack mig-plan --kubeconfig F --apply` end to end against the HTTP-level fake API server and its simulated MIG
manager: the plan read from the cluster's nodes and pods, the check that the MIG manager knows every planned layout,
the relabel of the free nodes only, a node left cordoned on a stuck state, and the metrics file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpupack.cli import main
from gpupack.core.admitted import admitted_pod
from tests.mig_manager_kit import CONFIG, STATE, FakeMigCluster, gpu_pod, mig_node, write_kubeconfig
from tests.migplan_rbac_kit import allowed, built, request_of

M = "nvidia.com/mig-"
OLD = {M + "1g.5gb": 16, M + "2g.10gb": 8, M + "3g.20gb": 8}
"""all-balanced on 8 A100-40GB GPUs."""
CONFIG_MAP = ("gpu-operator", "gpupack-mig-parted-config")


@dataclass
class Env:
    fake: FakeMigCluster
    kubeconfig: Path
    tmp: Path

    async def mig_plan(self, *argv: str) -> int:
        return await asyncio.to_thread(main, ["mig-plan", "--kubeconfig", str(self.kubeconfig), *argv])


def pending(name: str, memory: str) -> dict[str, Any]:
    pod = admitted_pod(name, {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": memory})
    pod["metadata"]["namespace"] = "ml"
    pod["status"] = {"phase": "Pending"}
    return pod


@pytest.fixture
async def env(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Env]:
    fake = FakeMigCluster(layouts={})
    for name, config, offered in (
        ("a100-1", "all-balanced", OLD),
        ("a100-2", "all-balanced", OLD),
        ("a100-busy", "all-1g.5gb", {M + "1g.5gb": 56}),
    ):
        node = mig_node(name, config, allocatable=offered)
        node["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
        fake.add(node)
    fake.add(mig_node("a100-unlabelled", "all-balanced", allocatable=OLD))  # no GPU count: not planned
    fake.pods.append(gpu_pod("embed-0", "a100-busy", M + "1g.5gb"))
    fake.pods += [pending(f"chat-{i}", "8Gi") for i in range(6)]  # 1g.10gb once it is offered
    fake.pods += [pending(f"rerank-{i}", "16Gi") for i in range(2)]  # 3g.20gb
    server = await aiohttp_server(fake.app())
    yield Env(fake, write_kubeconfig(tmp_path / "kubeconfig", server.port), tmp_path)


async def planned(env: Env, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The plan the command makes without --apply; teaches the fake MIG manager what each config creates."""
    assert await env.mig_plan("--json") == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    for node in doc["nodes"]:
        env.fake.layouts[node["config"]] = node["instances"]
    return doc


def publish(env: Env, configs: dict[str, Any]) -> None:
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs})
    env.fake.config_maps[CONFIG_MAP] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": CONFIG_MAP[0], "name": CONFIG_MAP[1]},
        "data": {"config.yaml": text},
    }


async def test_apply_relabels_the_free_node_the_plan_needs_and_leaves_the_busy_one(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await planned(env, capsys)
    assert doc["kept_busy"] == ["a100-busy"]
    assert doc["not_planned"] == {"a100-unlabelled": "GPU count unknown (no nvidia.com/gpu.count label)"}
    # the busy node's 1g.5gb serve its own pod; 2x (3g.20gb + 2x 1g.10gb) and 1x 4x 1g.10gb: 3 GPUs
    assert doc["demand"] == {M + "1g.10gb": 6, M + "1g.5gb": 1, M + "3g.20gb": 2}
    assert doc["gpus_needed"] == 3
    assert [n["node"] for n in doc["nodes"]] == ["a100-1"] and doc["left_as_they_are"] == ["a100-2"]
    (node,) = doc["nodes"]
    output = env.tmp / "mig.yaml"
    publish(env, {**doc["mig_parted_config"]["mig-configs"], "all-balanced": [], "all-disabled": []})
    metrics = env.tmp / "mig.prom"
    code = await env.mig_plan(
        "--apply", "--mig-config-map", "/".join(CONFIG_MAP), "--poll", "0.02", "--timeout", "5",
        "--metrics-file", str(metrics), "--output", str(output),
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "a100-1: applied" in out
    applied = env.fake.nodes["a100-1"]
    assert applied["metadata"]["labels"][CONFIG] == node["config"]
    assert applied["metadata"]["labels"][STATE] == "success"
    assert applied["spec"].get("unschedulable") is None
    assert env.fake.node_calls() == [("a100-1", "cordon"), ("a100-1", "relabel"), ("a100-1", "uncordon")]
    for untouched, config in (
        ("a100-2", "all-balanced"),
        ("a100-busy", "all-1g.5gb"),
        ("a100-unlabelled", "all-balanced"),
    ):
        assert env.fake.nodes[untouched]["metadata"]["labels"][CONFIG] == config
    # --output with --mig-config-map: the MIG manager's ConfigMap with the plan's layouts added, the others kept
    written = yaml.safe_load(output.read_text())
    assert (written["kind"], written["metadata"]) == ("ConfigMap", {"namespace": CONFIG_MAP[0], "name": CONFIG_MAP[1]})
    layouts = yaml.safe_load(written["data"]["config.yaml"])["mig-configs"]
    assert layouts == {**doc["mig_parted_config"]["mig-configs"], "all-balanced": [], "all-disabled": []}
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples}
    assert samples["gpupack_mig_apply_applied_nodes_total"] == 1


async def test_apply_refuses_layouts_the_mig_manager_does_not_know(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await planned(env, capsys)
    (name,) = {n["config"] for n in doc["nodes"]}
    assert name.startswith("gpupack-a100-40gb-")
    assert await env.mig_plan("--apply") == 2
    assert "give it as --mig-config-map NAMESPACE/NAME" in capsys.readouterr().err
    assert await env.mig_plan("--apply", "--mig-config-map", "gpu-operator/missing") == 2
    assert "ConfigMap gpu-operator/missing not found" in capsys.readouterr().err
    publish(env, {"all-balanced": []})
    assert await env.mig_plan("--apply", "--mig-config-map", "/".join(CONFIG_MAP)) == 2
    assert f"lacks {name}" in capsys.readouterr().err
    assert not [c for c in env.fake.calls if c.method == "PATCH"]  # nothing was touched


async def test_a_node_stuck_pending_is_left_cordoned_and_the_run_exits_1(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await planned(env, capsys)
    publish(env, doc["mig_parted_config"]["mig-configs"])
    env.fake.modes["a100-1"] = "stuck-pending"
    metrics = env.tmp / "mig.prom"
    code = await env.mig_plan(
        "--apply", "--mig-config-map", "/".join(CONFIG_MAP), "--poll", "0.02", "--timeout", "0.3",
        "--metrics-file", str(metrics), "--json",
    )  # fmt: skip
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    assert [(a["node"], a["outcome"]) for a in result["applied"]] == [("a100-1", "timeout")]
    assert env.fake.nodes["a100-1"]["spec"]["unschedulable"] is True
    assert [e["reason"] for e in env.fake.events] == ["MigReconfigureFailed"]
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text())}
    (sample,) = [s for s in families["gpupack_mig_apply_failures"].samples if s.name.endswith("_total")]
    assert sample.labels == {"reason": "timeout"} and sample.value == 1


async def test_the_shipped_rbac_allows_every_request_an_apply_makes_and_no_more(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await planned(env, capsys)
    publish(env, doc["mig_parted_config"]["mig-configs"])
    args = ["--apply", "--mig-config-map", "/".join(CONFIG_MAP), "--poll", "0.02", "--timeout", "5"]
    assert await env.mig_plan(*args) == 0
    objects = built()
    made = {request_of(c.method, c.path) for c in env.fake.calls}
    assert {(verb, resource) for verb, resource, _, _ in made} == {
        ("list", "nodes"), ("list", "pods"), ("get", "nodes"), ("patch", "nodes"), ("create", "events"),
        ("get", "configmaps"),
    }  # fmt: skip
    for request in made:
        assert allowed(objects, *request), request
    # and it can fail: what the role does not grant
    assert not allowed(objects, "delete", "nodes", None, "a100-1")
    assert not allowed(objects, "get", "configmaps", "gpu-operator", "default-mig-parted-config")
    assert not allowed(objects, "get", "configmaps", "kube-system", CONFIG_MAP[1])
    assert not allowed(objects, "create", "events", "ml", None)  # Node events only, in default
