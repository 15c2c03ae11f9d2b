"""The synthetic day (simulator.day): scenario validation, hand-checked numbers, the run without gpupack, and the
shipped example small."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gpupack.placement.choice
import gpupack.simulator.day.simulate
from gpupack.cli import main
from gpupack.core import contract
from gpupack.core.objects import PARTITIONING_LABELS
from gpupack.simulator.day.cluster import (
    MIG_PER_GPU,
    cluster_nodes,
    job_arrivals,
    job_pod,
    replica_pod,
    without_gpupack,
)
from gpupack.simulator.day.metrics import SimPod, saving
from gpupack.simulator.day.scenario import Scenario, ScenarioError, load_scenario, parse_scenario, replicas_at
from gpupack.simulator.day.simulate import DEFAULT_SCENARIO, RUNS, WITHOUT, _Day, compare, plot_day, run_all, run_day

SMALL = 0.5
"""The shipped example at half size: 11 nodes, every pool with a choice of nodes (at 0.25 most pools have one)."""


def tiny(**changes: Any) -> Scenario:
    """Two T4 nodes (4 GPUs time-sliced 4 ways), one latency-tolerant Deployment of 3 constant replicas, 1 hour."""
    doc: dict[str, Any] = {
        "name": "tiny",
        "hours": 1,
        "stepMinutes": 1,
        "nodes": [{"name": "t4", "count": 2, "gpu": "t4", "replicas": 4}],
        "inference": [
            {
                "name": "ocr",
                "peakReplicas": 3,
                "troughReplicas": 3,
                "latency": "tolerant",
                "utilization": {"mean": 0.2, "sd": 0},
            }
        ],
    }
    doc.update(changes)
    return parse_scenario(doc, "tiny.yaml")


@pytest.fixture(scope="module")
def small() -> Scenario:
    return load_scenario(DEFAULT_SCENARIO).with_changes(scale=SMALL)


@pytest.fixture(scope="module")
def small_results(small: Scenario) -> dict[str, Any]:
    return run_all(small)


# validation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes": [{"name": "a", "count": 1, "gpu": "v100"}]}, "tiny.yaml: nodes.0.gpu: Input should be"),
        (
            {"nodes": [{"name": "a", "count": 1, "gpu": "t4", "gpuz": 2}]},
            "nodes.0.gpuz: Extra inputs are not permitted",
        ),
        (
            {"nodes": [{"name": "a", "count": 1, "gpu": "h100", "replicas": 4}]},
            "nodes.0: Value error, replicas applies",
        ),
        ({"nodes": []}, "nodes: List should have at least 1 item"),
        (
            {"inference": [{"name": "x", "peakReplicas": 2, "troughReplicas": 5}]},
            "inference.0: Value error, troughReplicas (5) exceeds peakReplicas (2)",
        ),
        ({"inference": [{"name": "x", "peakReplicas": 2, "troughReplicas": 1, "gpuMemory": "lots"}]}, "gpuMemory"),
        (
            {"training": [{"name": "t", "arrivalsPerHour": 1, "durationMinutes": {"mean": 60}, "gpus": [0, 2]}]},
            "training.0.gpus",
        ),
        ({"batch": [{"name": "b", "arrivalsPerHour": 1}]}, "batch.0.durationMinutes: Field required"),
        ({"stepMinutes": 0}, "stepMinutes: Input should be greater than 0"),
        ({"policy": {"extender": {"scoring": "random"}}}, "policy: Value error, extender.scoring"),
        (
            {"training": [{"name": "ocr", "arrivalsPerHour": 1, "durationMinutes": {"mean": 60}}]},
            "workloads: name 'ocr' is used twice",
        ),
        ({"seed": -1}, "seed: Input should be greater than or equal to 0"),
        ({"emptyMinutes": float("inf")}, "emptyMinutes: Input should be a finite number"),
        ({"nodes": [{"name": "a", "count": 1, "gpu": "t4", "gpus": True}]}, "nodes.0.gpus: Input should be a valid"),
        ({"nodes": [{"name": "a", "count": 0, "gpu": "t4"}]}, "every group has count 0"),
        (
            {"batch": [{"name": "b", "namespace": "Bad NS!", "arrivalsPerHour": 1, "durationMinutes": {"mean": 5}}]},
            "batch.0.namespace: String should match pattern",
        ),
        (
            {
                "batch": [
                    {
                        "name": "b",
                        "arrivalsPerHour": 1,
                        "durationMinutes": {"mean": 5},
                        "priorityClass": {"name": "high", "value": 2_000_000_000},
                    }
                ]
            },
            "batch.0.priorityClass.value: Input should be less than or equal to 1000000000",
        ),
        (
            {
                "batch": [
                    {
                        "name": "b",
                        "arrivalsPerHour": 1,
                        "durationMinutes": {"mean": 5},
                        "priorityClass": {"name": "High Class"},
                    }
                ]
            },
            "batch.0.priorityClass.name: String should match pattern",
        ),
        (
            {"batch": [{"name": "b", "arrivalsPerHour": 1, "durationMinutes": {"mean": 5}, "gpupackLabels": "no"}]},
            "batch.0.gpupackLabels: Input should be a valid boolean",
        ),
        ({"autoscaling": {"provisionMinutes": -1}}, "autoscaling.provisionMinutes: Input should be greater than"),
        ({"autoscaling": {"provisionMinute": 5}}, "autoscaling.provisionMinute: Extra inputs are not permitted"),
        ({"nodes": [{"name": "a", "count": 1, "gpu": "t4", "pricePerHour": -2}]}, "nodes.0.pricePerHour"),
        (
            {"inference": [{"name": "x", "peakReplicas": 1, "troughReplicas": 1, "gpu": "v100"}]},
            "inference.0.gpu: Input should be",
        ),
    ],
)
def test_scenario_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        tiny(**change)
    assert message in str(caught.value)


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "day.yaml"
    bad.write_text("- just a list\n")
    with pytest.raises(ScenarioError, match=r"day\.yaml: the scenario must be a YAML mapping"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="scale: Input should be greater than 0"):
        tiny().with_changes(scale=0)
    merged = tmp_path / "merged.yaml"
    merged.write_text(
        "nodes:\n- &h100 {name: h100-od, count: 2, gpu: h100}\n- <<: *h100\n  name: h100-spot\n  spot: true\n"
    )
    assert [g.name for g in load_scenario(merged).nodes] == ["h100-od", "h100-spot"]  # merge keys still work
    bad.write_text("seed: 42\nhours: 6\nseed: 7\n")  # PyYAML alone would run seed 7
    with pytest.raises(ScenarioError, match=r"day\.yaml: not valid YAML: .*the key 'seed' is given twice"):
        load_scenario(bad)
    bad.write_bytes(b"\xe2\x28\xa1 not text")
    with pytest.raises(ScenarioError, match=r"day\.yaml: not a text file"):
        load_scenario(bad)


def test_replicas_follow_the_daily_curve() -> None:
    workload = load_scenario(DEFAULT_SCENARIO).inference[0]  # chat-7b: 35 at 14h, 7 at 2h
    assert replicas_at(workload, workload.peak_hour, 1.0) == workload.peak_replicas
    assert replicas_at(workload, workload.peak_hour - 12, 1.0) == workload.trough_replicas
    assert replicas_at(workload, workload.peak_hour + 12, 1.0) == workload.trough_replicas
    assert workload.peak_replicas == 5 * workload.trough_replicas
    assert replicas_at(workload, workload.peak_hour, 0.5) == 18


# hand-worked numbers ----------------------------------------------------------------------------------------
def test_tiny_day_gpupack_packs_onto_one_node() -> None:
    # 3 replicas x 1 time-sliced replica: one GPU of one node; the other node empty all hour.
    result = run_day(tiny(), "gpupack")
    summary = result.summary()
    assert set(result.gpus_in_use) == {1} and set(result.gpu_nodes) == {1}
    assert summary["gpu_hours"] == 1.0
    # each replica keeps its quarter of a GPU 20% busy: 3 x 0.2 x 1/4 = 0.15 GPU on 1 GPU in use
    assert sum(result.busy_gpus) / 60 == pytest.approx(0.15) and result.mean_utilization == pytest.approx(0.15)
    assert summary["gpu_nodes_peak"] == 1 and summary["gpu_nodes_mean"] == 1.0
    # empty for the whole 60 minutes: removable after 10, so 50 minutes, one scale-down
    assert summary["removable_nodes"] == 1 and summary["scale_downs"] == 1
    assert [s.removable_hours for s in result.empty_stretches] == [pytest.approx(50 / 60)]
    assert summary["billed_gpu_hours"] == pytest.approx(8 - 4 * 50 / 60, abs=0.05)
    assert summary["pending_pod_minutes"] == 0 and summary["pods_created"] == 3


def test_tiny_day_spread_uses_both_nodes() -> None:
    # spread puts the second replica on the empty node; the third lands on either: 2 GPUs on 2 nodes.
    result = run_day(tiny(), "spread")
    summary = result.summary()
    assert set(result.gpus_in_use) == {2} and set(result.gpu_nodes) == {2}
    assert summary["gpu_hours"] == 2.0 and result.mean_utilization == pytest.approx(0.075)
    assert summary["removable_nodes"] == 0 and summary["removable_node_hours"] == 0
    assert summary["billed_gpu_hours"] == 8.0


def test_empty_stretches_are_counted_from_when_the_node_empties(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 replicas for 30 minutes, then none: under spread both nodes are empty for the last 30 minutes, so each
    # is removable for 20 of them (10 minutes unneeded first).
    monkeypatch.setattr(
        "gpupack.simulator.day.simulate.replicas_at", lambda workload, hour, scale: 3 if hour < 0.5 else 0
    )
    result = run_day(tiny(), "spread")
    assert sorted(s.removable_hours for s in result.empty_stretches) == pytest.approx([20 / 60, 20 / 60])
    assert {(s.start_hour, s.end_hour) for s in result.empty_stretches} == {(0.5, 1.0)}
    assert result.summary()["scale_downs"] == 2 and result.summary()["removable_node_hours"] == pytest.approx(0.7)


def test_short_empty_stretches_are_not_removable(monkeypatch: pytest.MonkeyPatch) -> None:
    # gone for 9 minutes (20-29), back until the end: no node is removable under spread
    monkeypatch.setattr(
        "gpupack.simulator.day.simulate.replicas_at", lambda workload, hour, scale: 0 if 20 <= hour * 60 < 29 else 3
    )
    assert run_day(tiny(), "spread").empty_stretches == ()


def test_pending_pods_wait_and_count_minutes() -> None:
    # 40 replicas on 32 time-sliced slots: 8 wait the whole hour, 8 x 60 pending pod-minutes.
    scenario = tiny(
        inference=[{"name": "ocr", "peakReplicas": 40, "troughReplicas": 40, "latency": "tolerant"}],
    )
    summary = run_day(scenario, "gpupack").summary()
    assert summary["pending_pod_minutes"] == 480 and summary["pending_at_end"] == 8
    assert summary["pending_pod_minutes_by_class"] == {"inference": 480}


def test_jobs_leave_after_their_duration() -> None:
    scenario = tiny(
        inference=[],
        nodes=[{"name": "h100", "count": 1, "gpu": "h100"}],
        training=[{"name": "ft", "arrivalsPerHour": 6, "durationMinutes": {"mean": 5}, "gpus": 1}],
    )
    arrivals = job_arrivals(scenario)
    assert arrivals and all(a.run_steps == 5 for a in arrivals)
    result = run_day(scenario, "gpupack")
    # each job holds one GPU for exactly 5 steps: GPU-minutes = 5 x jobs that started and finished in the hour
    finished = sum(1 for a in arrivals if a.step + 5 <= 60)
    started = sum(1 for a in arrivals if a.step < 60)
    assert finished * 5 <= sum(result.gpus_in_use) <= started * 5


# autoscaling: nodes come and go --------------------------------------------------------------------------------
def autoscaled(**changes: Any) -> Scenario:
    """`tiny` with no node until a pod needs one: made 5 minutes after, removed after 10 minutes empty."""
    return tiny(autoscaling={"provisionMinutes": 5}, **changes)


def test_autoscaled_nodes_come_when_pods_need_them_and_count_only_while_they_exist() -> None:
    # 3 tolerant replicas from step 0, no node: one T4 node is made, there from step 5; each replica waits 5 minutes
    result = run_day(autoscaled(nodes=[{"name": "t4", "count": 2, "gpu": "t4", "pricePerHour": 1.2}]), "gpupack")
    summary = result.summary()
    assert result.present_nodes == (0,) * 5 + (1,) * 55
    assert summary["node_hours"] == pytest.approx(55 / 60, abs=0.01) and summary["nodes_peak"] == 1
    assert summary["cost"] == pytest.approx(1.2 * 55 / 60, abs=0.01)
    assert summary["pending_pod_minutes"] == 15


def test_an_autoscaled_node_goes_after_it_is_empty_for_empty_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    # replicas gone at minute 30: the node, empty from then, goes at minute 40 (emptyMinutes 10)
    monkeypatch.setattr(
        "gpupack.simulator.day.simulate.replicas_at", lambda workload, hour, scale: 3 if hour < 0.5 else 0
    )
    result = run_day(autoscaled(), "gpupack")
    assert result.present_nodes == (0,) * 5 + (1,) * 35 + (0,) * 20


def test_the_autoscaler_makes_the_cheapest_node_that_takes_the_pod() -> None:
    groups = [
        {"name": "t4-dear", "count": 2, "gpu": "t4", "pricePerHour": 4.0},
        {"name": "t4-cheap", "count": 2, "gpu": "t4", "pricePerHour": 1.0},
    ]
    result = run_day(autoscaled(nodes=groups), "gpupack")
    assert result.present_cost[-1] == 1.0 and result.present_nodes[-1] == 1


def test_a_team_pinning_its_model_gets_a_node_of_that_model_though_another_is_cheaper() -> None:
    groups = [
        {"name": "t4", "count": 2, "gpu": "t4", "pricePerHour": 5.0},
        {"name": "h100", "count": 1, "gpu": "h100", "pricePerHour": 1.0},  # cheaper, to show the pin decides
    ]
    chat = [{"name": "chat", "peakReplicas": 2, "troughReplicas": 2, "gpu": "t4", "latency": "tolerant"}]
    for run in ("none", "gpupack"):
        result = run_day(autoscaled(nodes=groups, inference=chat), run)
        assert result.present_cost[-1] == 5.0, run
    # unpinned, a whole GPU of any model: the cheapest node
    unpinned = [{"name": "chat", "peakReplicas": 2, "troughReplicas": 2, "latency": "tolerant"}]
    assert run_day(autoscaled(nodes=groups, inference=unpinned), "none").present_cost[-1] == 1.0


def test_a_pod_no_group_can_take_stays_pending_and_makes_no_node() -> None:
    # 9 whole GPUs on nodes of 8: no node takes it, none is made for it
    training = [{"name": "big", "arrivalsPerHour": 60, "durationMinutes": {"mean": 30}, "gpus": 9}]
    result = run_day(autoscaled(nodes=h100(2), inference=[], training=training), "gpupack")
    assert set(result.present_nodes) == {0} and result.summary()["pending_at_end"] > 0


def test_karpenters_spot_nodes_carry_its_capacity_type_and_no_taint() -> None:
    group = {"name": "t4", "count": 1, "gpu": "t4", "spot": True, "provisioner": "karpenter"}
    (node,) = cluster_nodes(tiny(nodes=[group]))
    assert (
        node["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
        and "node-type" not in node["metadata"]["labels"]
    )
    assert not node["spec"].get("taints")
    (default,) = cluster_nodes(tiny(nodes=[{**group, "provisioner": "node-group"}]))
    assert default["metadata"]["labels"]["node-type"] == "spot" and default["spec"]["taints"]


def test_the_cluster_day_scenario_needs_at_most_0_6_of_the_node_hours_without_gpupack() -> None:
    # what `make bench-cluster` measures on the living cluster, predicted: the scenario's stated claim
    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "cluster-day.yaml")
    assert scenario.autoscaling is not None
    before, after = (run_day(scenario, run).summary() for run in ("none", "gpupack"))
    assert after["node_hours"] <= 0.6 * before["node_hours"]
    assert after["pending_at_end"] == 0 and before["pending_at_end"] == 0


# without gpupack ---------------------------------------------------------------------------------------------
def h100(count: int = 1, spot: bool = False) -> list[dict[str, Any]]:
    """One group of H100 nodes: 8 whole GPUs each (`nvidia.com/gpu`), the only GPUs a pod without gpupack can use."""
    return [{"name": "h100-spot" if spot else "h100", "count": count, "gpu": "h100", "spot": spot}]


def serving(replicas: int) -> list[dict[str, Any]]:
    """A latency-critical Deployment of `replicas` constant replicas, each 20 % busy."""
    return [{"name": "chat", "peakReplicas": replicas, "troughReplicas": replicas, "utilization": {"mean": 0.2}}]


def written(pod: dict[str, Any]) -> dict[str, Any]:
    """What a test reads of a pod written without gpupack."""
    spec = pod["spec"]
    return {
        "labels": pod["metadata"]["labels"],
        "resources": [c["resources"] for c in spec["containers"]],
        "scheduling": {k: spec.get(k) for k in ("affinity", "nodeSelector", "priorityClassName", "schedulerName")},
        "priority": spec["priority"],
        "tolerations": [t["key"] for t in spec["tolerations"]],
    }


@pytest.mark.parametrize(
    ("raw", "gpus"),
    [
        (replica_pod(load_scenario(DEFAULT_SCENARIO).inference[0], 1), 1),  # chat-7b: a 2g.10gb slice with gpupack
        (replica_pod(load_scenario(DEFAULT_SCENARIO).inference[4], 1), 1),  # ocr: a time-sliced replica with gpupack
        (job_pod(load_scenario(DEFAULT_SCENARIO).training[1], "training", 1, 8), 8),  # pretrain
        (job_pod(load_scenario(DEFAULT_SCENARIO).batch[0], "batch", 1, 1), 1),  # embed-backfill
    ],
)
def test_a_pod_without_gpupack_asks_whole_gpus_and_nothing_else(raw: dict[str, Any], gpus: int) -> None:
    before = json.dumps(raw, sort_keys=True)
    assert written(without_gpupack(raw)) == {
        "labels": {},
        "resources": [{"limits": {"nvidia.com/gpu": str(gpus)}}],
        "scheduling": {
            "affinity": None,
            "nodeSelector": None,
            "priorityClassName": None,
            "schedulerName": "default-scheduler",
        },
        "priority": 0,
        "tolerations": ["node.kubernetes.io/not-ready"],  # the API server's default, not the spot taint
    }
    assert json.dumps(raw, sort_keys=True) == before  # the raw pod is left for the other runs


PRIORITY_DAY = Path(DEFAULT_SCENARIO).parent / "priority-day.yaml"


def test_another_teams_job_asks_whole_gpus_with_its_own_priority_class_and_no_gpupack_label() -> None:
    research = load_scenario(PRIORITY_DAY).training[0]
    raw = job_pod(research, "training", 1, 4)
    assert written(raw)["labels"] == {}
    assert written(raw)["resources"] == [{"limits": {"nvidia.com/gpu": "4"}}]
    assert (raw["spec"]["priorityClassName"], raw["spec"]["priority"]) == ("research-low", 1000)
    assert without_gpupack(raw) is raw  # written without gpupack already: the run without it sees the same pod


def test_on_the_priority_day_the_verb_takes_no_pod_of_the_higher_priority() -> None:
    # the pipeline team's Jobs (priority 50000) are the scenario's `batch`, the research team's (1000) `training`:
    # ranked by gpupack's classes, all "other", the verb once chose the pipeline's 1-GPU pods
    day = load_scenario(PRIORITY_DAY).with_changes(hours=8)
    result = run_day(day, "gpupack", preemption="verb").summary()
    assert result["victims"] > 0
    assert result["victims_by_class"].get("batch", 0) == 0, result["victims_by_class"]


def test_the_run_without_gpupack_calls_nothing_of_gpupack(small: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the run without gpupack called gpupack")

    monkeypatch.setattr(gpupack.simulator.day.simulate, "plan", called)  # the webhook
    monkeypatch.setattr(gpupack.placement.choice, "judge", called)  # the extender's filter and scores
    monkeypatch.setattr(gpupack.placement.choice, "priorities", called)  # the extender's answers
    monkeypatch.setattr(_Day, "live", called)  # the DCGM utilizations only the extender reads
    created: list[SimPod] = []
    bind = _Day.bind

    def record(day: _Day, sim: SimPod, node: str, step: int) -> None:
        created.append(sim)
        assert day.records[node].allocatable.get(contract.RESOURCE_GPU, 0) > 0 and not day.records[node].spot
        bind(day, sim, node, step)

    monkeypatch.setattr(_Day, "bind", record)
    result = run_day(small.with_changes(hours=4), WITHOUT)
    assert result.run == WITHOUT and result.pods_created > 100 and len(created) >= 16
    for sim in created:
        assert dict(sim.demand.requests) == {contract.RESOURCE_GPU: sim.demand.gpu_count}  # no CPU, memory, MIG
        assert sim.priority == 0 and sim.kind in ("inference", "training", "batch")
        assert not any(k.startswith(contract.DOMAIN) for k in sim.pod["metadata"]["labels"])
        assert not (sim.pod["metadata"].get("annotations") or {})  # nothing a webhook writes


def test_every_run_sees_the_same_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    # the same pods created at the same steps with the same utilization and duration draws, whatever the run
    scenario = load_scenario(DEFAULT_SCENARIO).with_changes(scale=SMALL, hours=3, warmup_hours=1)
    seen: dict[str, list[tuple[str, float, int, int | None]]] = {}
    admit = _Day.admit

    def record(day: _Day, raw: dict[str, Any], busy: float, step: int, stream: str, run: int | None, kind: str) -> Any:
        seen.setdefault(day.run_name, []).append((raw["metadata"]["name"], busy, step, run))
        return admit(day, raw, busy, step, stream, run, kind)

    monkeypatch.setattr(_Day, "admit", record)
    results = run_all(scenario)
    assert set(seen) == set(RUNS) == {"none", "spread", "gpupack"}
    assert seen["none"] == seen["spread"] == seen["gpupack"] and len(seen["none"]) > 50
    assert len({r.pods_created for r in results.values()}) == 1


def test_without_gpupack_the_same_machines_advertise_whole_gpus() -> None:
    # nobody time-slices or partitions GPUs that no pod asks slices of: the T4s and A100s advertise nvidia.com/gpu
    scenario = tiny(nodes=[{"name": "t4", "count": 1, "gpu": "t4"}, {"name": "a100", "count": 1, "gpu": "a100-mig"}])
    partitioned = {n["metadata"]["name"]: n for n in cluster_nodes(scenario)}
    whole = {n["metadata"]["name"]: n for n in cluster_nodes(scenario, partitioned=False)}
    gpu_keys = {k for n in partitioned.values() for k in n["status"]["allocatable"] if k.startswith("nvidia.com/")}
    assert gpu_keys == {contract.RESOURCE_GPU_SHARED, *MIG_PER_GPU}
    for name, node in whole.items():
        labels = node["metadata"]["labels"]
        gpus = {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia.com/")}
        assert gpus == {contract.RESOURCE_GPU: labels["nvidia.com/gpu.count"]}, name
        assert not set(labels) & set(PARTITIONING_LABELS) and not labels["nvidia.com/gpu.product"].endswith("SHARED")
        assert node["spec"] == partitioned[name]["spec"]
        assert node["status"]["allocatable"]["cpu"] == partitioned[name]["status"]["allocatable"]["cpu"]


def test_without_gpupack_each_replica_holds_a_whole_t4() -> None:
    # 3 replicas on 2 T4 nodes no longer time-sliced: 3 whole GPUs 20 % busy, nothing pending
    result = run_day(tiny(), WITHOUT)
    summary = result.summary()
    assert set(result.gpus_in_use) == {3} and result.mean_utilization == pytest.approx(0.2)
    assert summary["pending_pod_minutes"] == 0 and summary["pending_at_end"] == 0


def test_without_gpupack_each_replica_holds_a_whole_gpu_at_its_own_utilization() -> None:
    # 3 replicas on 2 H100 nodes: 3 whole GPUs 20 % busy. LeastAllocated puts the second on the empty node (score
    # 10 against 9), the third on either: both nodes in use, none removable, all 16 GPUs billed.
    result = run_day(tiny(nodes=h100(2), inference=serving(3)), WITHOUT)
    summary = result.summary()
    assert set(result.gpus_in_use) == {3} and set(result.gpu_nodes) == {2}
    assert summary["gpu_hours"] == 3.0 and result.mean_utilization == pytest.approx(0.2)
    assert summary["busy_gpu_hours"] == pytest.approx(0.6)
    assert summary["removable_node_hours"] == 0 and summary["billed_gpu_hours"] == 16.0
    assert summary["pending_pod_minutes"] == 0


def test_without_gpupack_more_whole_gpus_asked_than_there_are_pend() -> None:
    # 10 replicas, 8 whole GPUs: 8 run all hour, 2 wait all hour
    summary = run_day(tiny(nodes=h100(1), inference=serving(10)), WITHOUT).summary()
    assert summary["gpu_hours"] == 8.0 and summary["mean_utilization_pct"] == 20.0
    assert summary["pending_pod_minutes"] == 2 * 60 and summary["pending_at_end"] == 2


def test_without_gpupack_jobs_do_not_go_to_tainted_spot_nodes() -> None:
    # only spot H100s: gpupack's checkpointing training pods tolerate the taint and run; without gpupack they wait
    def only_spot(checkpoint: bool) -> Scenario:
        jobs = {
            "name": "ft",
            "arrivalsPerHour": 6,
            "durationMinutes": {"mean": 30},
            "gpus": 2,
            "checkpoint": checkpoint,
        }
        return tiny(inference=[], nodes=h100(1, spot=True), training=[jobs])

    scenario = only_spot(True)
    arrivals = [a for a in job_arrivals(scenario) if a.step < 60]
    assert arrivals
    without = run_day(scenario, WITHOUT).summary()
    assert without["gpu_hours"] == 0 and without["pending_at_end"] == len(arrivals)
    assert without["pending_pod_minutes"] == sum(60 - a.step for a in arrivals)
    assert run_day(scenario, "gpupack").summary()["spot_gpu_hours"] > 0
    # training that does not checkpoint stays off spot with gpupack too: here, where there is nothing else, it waits
    assert run_day(only_spot(False), "gpupack").summary()["spot_gpu_hours"] == 0


def test_without_gpupack_a_multi_gpu_job_holds_its_gpus() -> None:
    scenario = tiny(
        inference=[],
        nodes=h100(1),
        training=[{"name": "ft", "arrivalsPerHour": 2, "durationMinutes": {"mean": 10}, "gpus": 4}],
    )
    arrivals = job_arrivals(scenario)
    result = run_day(scenario, WITHOUT)
    # at most two 4-GPU jobs at a time on 8 GPUs; each holds 4 GPUs for its 10 steps once bound
    assert set(result.gpus_in_use) <= {0, 4, 8} and max(result.gpus_in_use) > 0
    assert sum(result.gpus_in_use) <= 4 * 10 * len(arrivals)


@pytest.mark.parametrize(
    ("saved", "before", "pending", "sentence"),
    [
        (4.5, "spread", 0, "gpupack saves 4.5% of the GPU-hours of spread"),
        (
            -85.1,
            WITHOUT,
            696,
            "gpupack uses 85.1% more GPU-hours than the cluster without gpupack, where 696 pods were still pending"
            " at the end of the day (699,663 pending pod-minutes)",
        ),
    ],
)
def test_the_saving_says_when_the_other_run_left_pods_pending(
    saved: float, before: str, pending: int, sentence: str
) -> None:
    assert saving(saved, before, {"pending_at_end": pending, "pending_pod_minutes": 699663.0}) == sentence


# the shipped example, small -----------------------------------------------------------------------------------
def test_example_is_deterministic(small: Scenario, small_results: dict[str, Any]) -> None:
    assert run_day(small, "gpupack") == small_results["gpupack"]
    assert run_day(small, WITHOUT) == small_results[WITHOUT]
    spread, gpupack = small_results["spread"], small_results["gpupack"]
    assert spread.pods_created == gpupack.pods_created == small_results[WITHOUT].pods_created > 100
    assert spread.pods_denied == 0
    assert spread.summary()["busy_gpu_hours"] > 0


def test_example_without_gpupack_is_the_guides_before(small: Scenario, small_results: dict[str, Any]) -> None:
    # whole GPUs held by replicas 15-30 % busy: the guide's (docs/method.md) "~20 %". Without spot tolerations only the
    # on-demand nodes take pods, the spot pools sit empty and jobs pend for on-demand GPUs
    data = compare(small, small_results)
    without, gpupack = data["policies"][WITHOUT], data["policies"]["gpupack"]
    on_demand = [g for g in small.nodes if not g.spot]
    on_demand_gpus = sum(g.gpus_per_node * small.scaled_count(g.count) for g in on_demand)
    assert 15 <= without["mean_utilization_pct"] <= 30 < gpupack["mean_utilization_pct"]
    assert without["peak_gpus_in_use"] <= on_demand_gpus and without["spot_gpu_hours"] == 0
    assert without["gpu_nodes_peak"] <= sum(small.scaled_count(g.count) for g in on_demand)
    assert without["gpu_hours"] > gpupack["gpu_hours"]
    assert without["pending_pod_minutes"] > 100 * gpupack["pending_pod_minutes"] and without["pending_at_end"] > 0
    assert data["gpupack_vs_none"]["mean_utilization_pct"] > 0
    assert data["gpupack_vs_none"]["pending_pod_minutes"] < 0


def test_example_gpupack_beats_spread(small: Scenario, small_results: dict[str, Any]) -> None:
    data = compare(small, small_results)
    spread, gpupack = data["policies"]["spread"], data["policies"]["gpupack"]
    assert gpupack["mean_utilization_pct"] > spread["mean_utilization_pct"]
    # fewer GPU-hours, or spread leaves pods waiting for the GPUs it spread over (it does at this scale)
    waits = gpupack["pending_pod_minutes"] < spread["pending_pod_minutes"] / 10
    assert gpupack["gpu_hours"] < spread["gpu_hours"] or waits
    assert gpupack["gpu_nodes_mean"] < spread["gpu_nodes_mean"]
    assert gpupack["removable_node_hours"] > spread["removable_node_hours"]
    assert gpupack["billed_gpu_hours"] < spread["billed_gpu_hours"]
    assert data["gpupack_vs_spread"]["gpu_hours_saved_pct"] > 0 or waits
    json.dumps(data)


def test_plot_and_cli(tmp_path: Path, small_results: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "day.png"
    plot_day(small_results, picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["simulate", "--scenario", str(DEFAULT_SCENARIO), "--scale", "0.25", "--hours", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["policies"]) == ["none", "spread", "gpupack"] and data["hours"] == 2
    assert {"gpupack_vs_none", "gpupack_vs_spread"} <= set(data)
    assert main(["simulate", "--scenario", str(DEFAULT_SCENARIO), "--scale", "0.25", "--hours", "2"]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header == ["without", "gpupack", "spread", "gpupack"]
    assert main(["simulate", "--scenario", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
