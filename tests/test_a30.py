"""The A30 in every consumer of the GPU catalog: 4 compute and 4 memory slices, not the A100's 7 and 8.

A fully busy A30 `4g.24gb` instance is a fully busy GPU. It read 57 % (4 of 7) in the extender and the report, and
counted as half a GPU (4 of 8 memory slices): a saturated A30 node was "ok" and drew more pods. Each case here goes
through a consumer's own entry point (the extender's live view, inventory and `/prioritize`, the report's fold,
its real Prometheus source and the savings replay, `gpupack mig-plan`); the alerts' case is in
tests/monitoring/gpu.test.yaml (promtool).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupack.cli import main
from gpupack.core.admitted import admitted_pod
from gpupack.core.dcgm import FB_FREE, FB_USED, GR_ENGINE_ACTIVE
from gpupack.core.thresholds import Thresholds
from gpupack.extender.app import make_app
from gpupack.extender.inventory import node_from_json
from gpupack.extender.live import aggregate
from gpupack.extender.sources import parse_exposition
from gpupack.report.prometheus import PrometheusUsage
from gpupack.report.savings import pod_work
from gpupack.report.usage import GpuUsage, Usage, Window, fold_mig, node_usage
from gpupack.testing.dcgm import MigGpu, MigInstance, Workload, exposition
from gpupack.testing.dcgm import Node as ExporterNode
from gpupack.testing.history import (
    PROMETHEUS,
    PROMTOOL,
    Device,
    HistoryNode,
    PrometheusServer,
    Stint,
    backfill,
    constant,
    write_openmetrics,
)
from tests.extender_kit import extender_for, policy, registry
from tests.report_cluster_kit import inputs, pod, usage

A30 = "NVIDIA A30"
M = "nvidia.com/mig-"
NOW = 1_800_000_000.0
SLICE = {"requests": {M + "1g.6gb": "1"}, "limits": {M + "1g.6gb": "1"}}


def a30_node(name: str, layout: str, instances: dict[str, int], gpus: int = 1) -> dict[str, Any]:
    """An A30 node as GFD and the MIG manager label it, advertising `instances` (mixed strategy)."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A30",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "24576",
        "nvidia.com/mig.config": layout,
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.capable": "true",
    }
    allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110", **{M + p: str(n) for p, n in instances.items()}}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def live_utils(*instances: MigInstance) -> dict[str, float | None]:
    """The extender's utilization of one A30 GPU holding `instances`, read from the exporter's text."""
    text = exposition([ExporterNode("a30-1", [MigGpu(instances)], model=A30)])
    live = aggregate(parse_exposition(text, NOW), None, NOW)
    return {index: gpu.util for index, gpu in live.nodes["a30-1"].items()}


# the extender ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instances", "expected"),
    [
        ([MigInstance("4g.24gb", 0, 1.0)], 1.0),
        ([MigInstance("2g.12gb", 1, 1.0), MigInstance("2g.12gb", 2, 0.5)], 0.75),
        ([MigInstance("1g.6gb", i, 0.9) for i in range(4)], 0.9),
        ([MigInstance("2g.12gb", 1, 1.0), MigInstance("1g.6gb", 3, 1.0)], 0.75),
    ],
    ids=["busy-4g.24gb", "two-2g.12gb", "four-1g.6gb", "2g-and-1g"],
)
def test_the_extender_reads_an_a30_instance_as_a_share_of_four_compute_slices(
    instances: list[MigInstance], expected: float
) -> None:
    assert live_utils(*instances) == {"0": pytest.approx(expected)}


@pytest.mark.parametrize(("profile", "count", "share"), [("4g.24gb", 1, 1.0), ("2g.12gb", 2, 0.5), ("1g.6gb", 4, 0.25)])
def test_an_a30_instance_holds_its_share_of_four_memory_slices(profile: str, count: int, share: float) -> None:
    record = node_from_json(a30_node("a30-1", f"all-{profile}", {profile: count}), policy())
    assert record.gpu_model == "A30-24GB"
    assert record.shares == {M + profile: share}
    assert record.gpu_capacity == pytest.approx(1.0)  # the node's one GPU, whatever its layout


async def test_the_extender_does_not_send_more_pods_to_a_saturated_a30(aiohttp_client: Any) -> None:
    # Two A30 nodes, each 4x 1g.6gb with three taken. On `busy` the three run flat out: the GPU is 75 % busy, past
    # the 60 % target. On `calm` they run at 62 %: 46.5 %, below it. Read as shares of 7 slices (43 % and 27 %),
    # `busy` looked closer to the target and got the next replica.
    layout = {"1g.6gb": 4}
    nodes = [a30_node("busy", "all-1g.6gb", layout), a30_node("calm", "all-1g.6gb", layout)]
    labels = {"gpupack.io/workload": "inference", "gpupack.io/latency": "tolerant"}
    taken = []
    for node in ("busy", "calm"):
        for i in range(3):
            bound = admitted_pod(
                f"{node}-{i}", labels, {"requests": {M + "1g.6gb": "1"}, "limits": {M + "1g.6gb": "1"}}
            )
            bound["metadata"]["uid"] = f"uid-{node}-{i}"
            bound["spec"]["nodeName"] = node
            bound["status"] = {"phase": "Running"}
            taken.append(bound)
    activity = {"busy": 1.0, "calm": 0.62}
    exporters = [
        ExporterNode(n, [MigGpu([MigInstance("1g.6gb", i, activity[n] if i < 3 else 0.0) for i in range(4)])], A30)
        for n in ("busy", "calm")
    ]
    extender = extender_for(nodes, taken)
    extender.live = aggregate(parse_exposition(exposition(exporters), NOW), None, NOW)
    assert [extender.live.nodes[n]["0"].util for n in ("busy", "calm")] == [pytest.approx(0.75), pytest.approx(0.465)]
    client = await aiohttp_client(make_app(extender, registry()))
    asking = admitted_pod("next", labels, SLICE)
    asking["metadata"]["uid"] = "uid-next"
    answer = await (await client.post("/prioritize", json={"Pod": asking, "NodeNames": ["busy", "calm"]})).json()
    scores = {entry["Host"]: entry["Score"] for entry in answer}
    assert scores["calm"] > scores["busy"], scores


# the report -----------------------------------------------------------------------------------------------------


def a30_instance(profile: str, instance: str, engine: float, pods: frozenset[str] = frozenset()) -> GpuUsage:
    return GpuUsage("a30-1", "0", A30, instance, profile, engine_mean=engine, fb_total=24000.0, pods=pods)


def test_the_report_folds_a_busy_4g_24gb_into_a_fully_busy_gpu_and_calls_the_node_hot() -> None:
    (gpu,) = fold_mig([a30_instance("4g.24gb", "0", 100.0)])
    assert gpu.engine_mean == pytest.approx(100.0)
    node = node_usage("a30-1", [gpu], "gpu-util")
    assert node.util_mean == pytest.approx(100.0)
    assert Thresholds().node_class(node.util_mean) == "hot"


def test_the_report_folds_an_a30s_smaller_instances_over_four_slices() -> None:
    (gpu,) = fold_mig([a30_instance("2g.12gb", "1", 80.0), a30_instance("1g.6gb", "3", 40.0)])
    assert gpu.engine_mean == pytest.approx((2 * 80 + 1 * 40) / 4)  # the fourth slice has no instance: idle


def test_the_savings_replay_counts_a_busy_4g_24gb_as_one_gpu_of_work() -> None:
    objects = [pod("vllm-7d9f8c-a", "a30-1", {M + "4g.24gb": "1"})]
    found = inputs(usage(a30_instance("4g.24gb", "0", 100.0, frozenset({"ml/vllm-7d9f8c-a"}))), objects)
    assert found.cluster is not None
    assert pod_work(found, {}, found.cluster.pods) == {"ml/vllm-7d9f8c-a": pytest.approx(1.0)}


D = 86400.0
END = 1793577600.0
WINDOW = Window(END - D, END)


@pytest.fixture(scope="module")
def prometheus_usage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Usage]:
    """A day of an A30 node in a real Prometheus: GPU 0 one 4g.24gb at 95 %, GPU 1 two 2g.12gb at 80 % and idle."""
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")

    def instance(index: int, profile: str, gid: int, engine: float) -> Device:
        signals = {GR_ENGINE_ACTIVE: constant(engine), FB_USED: constant(5000), FB_FREE: constant(6000)}
        return Device(index, signals, mig=(profile, gid), stints=(Stint(END - 2 * D, Workload(f"m-{gid}", "ml")),))

    node = HistoryNode(
        "a30-1",
        [instance(0, "4g.24gb", 0, 0.95), instance(1, "2g.12gb", 1, 0.8), instance(1, "2g.12gb", 2, 0.0)],
        model=A30,
    )
    workdir = tmp_path_factory.mktemp("a30")
    text = workdir / "dcgm.om"
    with text.open("w") as out:
        write_openmetrics(out, [node], np.arange(END - 2 * D, END + D, 300.0))
    backfill(text, workdir / "tsdb", block_hours=48)
    with PrometheusServer(workdir / "tsdb", oldest=END - 2 * D) as server:
        source = PrometheusUsage(server.url)
        try:
            yield source.usage(WINDOW, "gpu-util", Thresholds())
        finally:
            source.close()
    shutil.rmtree(workdir, ignore_errors=True)


def test_the_report_reads_a_busy_a30_from_prometheus_as_busy(prometheus_usage: Usage) -> None:
    by_gpu = {gpu.gpu: gpu for gpu in prometheus_usage.physical()}
    assert by_gpu["0"].engine_mean == pytest.approx(95.0)
    assert by_gpu["1"].engine_mean == pytest.approx(2 * 80 / 4)
    node = prometheus_usage.nodes()["a30-1"]
    assert node.util_mean == pytest.approx((95 + 40) / 2)
    # the hourly query folds the instances in PromQL, with the same slices
    assert prometheus_usage.hourly["a30-1"] and all(h == pytest.approx(67.5) for h in prometheus_usage.hourly["a30-1"])


# mig-plan -------------------------------------------------------------------------------------------------------


A30_POLICY = """
migProfiles:                  # the A30's profiles (the default policy offers the A100, H100 and H200 ones)
  - {name: 1g.6gb, memory: 6Gi, computeSlices: 1, gpu: A30-24GB}
  - {name: 2g.12gb, memory: 12Gi, computeSlices: 2, gpu: A30-24GB}
  - {name: 4g.24gb, memory: 24Gi, computeSlices: 4, gpu: A30-24GB}
"""


def test_mig_plan_sizes_and_places_every_a30_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Two free A30 nodes. Pending: labelled inference needing 5Gi and 10Gi, which the webhook's sizing gives 1g.6gb
    # and 2g.12gb; a pod asking a 4g.24gb itself; and labelled inference needing 20Gi, which sizes to a whole GPU
    # (4g.24gb is the A30's whole-GPU profile, as 7g is the A100's: mig-plan offers it to no sized pod). The plan
    # holds the three instances on the two nodes' GPUs under the A30's rules (4 slices each: the 4g.24gb fills
    # one GPU, the 2g.12gb and the 1g.6gb share the other).
    nodes = [a30_node(f"a30-{i}", "all-1g.6gb", {"1g.6gb": 4}) for i in (1, 2)]
    pods = []
    for name, memory in (("small", "5Gi"), ("mid", "10Gi"), ("large", "20Gi")):
        pending = admitted_pod(name, {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": memory})
        pods.append(pending)
    pods.append(admitted_pod("asks", resources={"limits": {M + "4g.24gb": "1"}}))
    for pending in pods:
        pending["kind"] = "Pod"
        pending["status"] = {"phase": "Pending"}
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": nodes + pods}))
    config = tmp_path / "policy.yaml"
    config.write_text(A30_POLICY)
    code = main(["mig-plan", "--cluster", str(cluster), "--config", str(config), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["demand"] == {M + "1g.6gb": 1, M + "2g.12gb": 1, M + "4g.24gb": 1}
    assert doc["unserved"] == {} and doc["whole_gpus_pending"] == 1
    assert doc["gpus_needed"] == 2 and doc["nodes_needed"] == 2
    planned = [gpu for node in doc["nodes"] for gpu in node["gpus"]]
    slices = {"1g.6gb": 1, "2g.12gb": 2, "4g.24gb": 4}
    assert {"4g.24gb": 1} in planned
    assert all(sum(slices[p] * n for p, n in gpu.items()) <= 4 for gpu in planned)
    served = {p: sum(gpu.get(p, 0) for gpu in planned) for p in slices}
    assert all(served[p] >= 1 for p in slices), served
