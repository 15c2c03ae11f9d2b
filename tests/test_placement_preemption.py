"""kube-scheduler's preemption in the simulator (`gpupack.placement.preemption`, `Placement.preemption`) and the
synthetic day with and without the extender's preempt verb: victims worked out by hand, the issue's hot node, and
the day's victims, wasted victims and work lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupack.cli import main
from gpupack.core.checkout import REPOSITORY
from gpupack.core.policy import Policy
from gpupack.extender.demand import demand_of
from gpupack.placement.choice import Placement, constraints_of
from gpupack.placement.preemption import Running, pick, select_victims
from gpupack.simulator.day.metrics import SimPod
from gpupack.simulator.day.preemption import compare_preemption
from gpupack.simulator.day.scenario import load_scenario
from gpupack.simulator.day.simulate import _Day, run_day
from tests.extender_kit import gpu_pod, node

GPU = "nvidia.com/gpu"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}
CONTENTION = REPOSITORY / "scenarios" / "contention-day.yaml"


def running(key: str, priority: int, started: float, gpus: int, node_name: str = "n") -> Running:
    return Running(key, node_name, priority, started, {GPU: gpus})


# the dry run on one node ---------------------------------------------------------------------------------------


def test_the_dry_run_gives_back_the_most_important_pods_first() -> None:
    # 4 GPUs held by a (priority 10, oldest, 2 GPUs), b (10, newer, 1) and c (-100, 1); the pod needs 2. With all
    # three gone 4 are free; a is given back first (2 free: fits), then b (1 free: no), then c (no): b and c die,
    # although a alone would have made room. kube-scheduler's order, not the fewest victims.
    pods = [running("a", 10, 0.0, 2), running("b", 10, 5.0, 1), running("c", -100, 1.0, 1)]
    victims = select_victims({GPU: 2}, 100, {GPU: 4}, {GPU: 4}, pods)
    assert [v.key for v in victims] == ["b", "c"]


@pytest.mark.parametrize(
    ("pods", "used", "why"),
    [
        ([running("a", 100, 0.0, 4)], 4, "no pod of lower priority"),
        ([running("a", 10, 0.0, 1), running("x", 500, 0.0, 3)], 4, "does not fit with every lower pod gone"),
        ([running("a", 10, 0.0, 2)], 2, "fits without a victim"),
    ],
)
def test_a_node_is_no_candidate(pods: list[Running], used: int, why: str) -> None:
    assert select_victims({GPU: 2}, 100, {GPU: 4}, {GPU: used}, pods) == (), why


def test_the_node_is_picked_by_kube_schedulers_rules_in_order() -> None:
    rng = np.random.default_rng(0)
    # the lowest highest-priority victim wins over fewer victims
    assert (
        pick({"x": [running("t", 10, 0, 1)], "y": [running("b1", -100, 0, 1), running("b2", -100, 0, 1)]}, rng) == "y"
    )
    # then fewer victims (the sum of shifted priorities)
    assert pick({"x": [running("t1", 10, 0, 1), running("t2", 10, 0, 1)], "y": [running("t3", 10, 0, 1)]}, rng) == "y"
    # then the latest start among the highest-priority victims
    assert pick({"x": [running("old", 10, 1.0, 1)], "y": [running("new", 10, 9.0, 1)]}, rng) == "y"
    assert pick({}, rng) is None


def test_a_tie_after_every_rule_is_broken_at_random() -> None:
    rng = np.random.default_rng(1)
    same = {"x": [running("a", 10, 0, 1)], "y": [running("b", 10, 0, 1)]}
    assert {pick(same, rng) for _ in range(40)} == {"x", "y"}


# the hot node, through the extender's functions ------------------------------------------------------


def placed(name: str, labels_workload: str, priority: int, **labels: str) -> SimPod:
    pod = gpu_pod(GPU, 1, labels_workload, name=name, **labels)
    pod["spec"]["priority"] = priority
    return SimPod(pod, demand_of(pod, Policy()), priority, 0.9, 0, 0, name, constraints_of(pod))


def hot_and_cool(started_on_hot: float) -> tuple[Placement, dict[str, list[Running]], Any]:
    """Two full 2-GPU H100 nodes of training pods; `hot`'s GPUs at 95 %, `cool`'s at 50 %."""
    placement = Placement(
        [node("hot", gpus={GPU: 2}, labels=H100), node("cool", gpus={GPU: 2}, labels=H100)],
        Policy(),
        np.random.default_rng(0),
        extender=True,
    )
    run: dict[str, list[Running]] = {}
    for name, started in (("hot", started_on_hot), ("cool", 0.0)):
        for i in range(2):
            pod = placed(f"{name}-{i}", "training", 10_000)
            placement.bind(pod, name)
            run.setdefault(name, []).append(Running(pod.demand.key, name, 10_000, started, pod.demand.requests))
    live = placement.live({"hot": 1.9, "cool": 1.0}, 0.0, 1)
    return placement, run, placement.view(live)


def test_without_the_verb_kube_scheduler_preempts_on_the_hot_node_the_extender_then_refuses() -> None:
    placement, run, view = hot_and_cool(started_on_hot=9.0)  # the hot node's victims started later: it wins
    llm = placed("llm", "inference", 100_000)
    node_name, victims = placement.preemption(llm, 100_000, run, view, 0.0, verb=False) or ("", ())
    assert node_name == "hot" and len(victims) == 1
    placement.state.remove_pod(victims[0].key)
    assert not placement.passes(llm, "hot", view, 0.0)  # the GPU freed is still hot in the window: refused


def test_with_the_verb_the_hot_node_is_dropped_and_the_victim_dies_where_the_pod_goes() -> None:
    placement, run, view = hot_and_cool(started_on_hot=9.0)
    llm = placed("llm", "inference", 100_000)
    node_name, victims = placement.preemption(llm, 100_000, run, view, 0.0, verb=True) or ("", ())
    assert node_name == "cool" and len(victims) == 1
    placement.state.remove_pod(victims[0].key)
    assert placement.passes(llm, "cool", view, 0.0)


def test_a_hot_node_with_room_needs_no_victim_so_no_one_dies_there() -> None:
    placement, run, view = hot_and_cool(started_on_hot=9.0)
    placement.state.remove_pod(run["hot"][1].key)  # the hot node has a free GPU, still hot in the window
    llm = placed("llm", "inference", 100_000)
    assert not placement.passes(llm, "hot", view, 0.0)
    found = placement.preemption(llm, 100_000, {"hot": run["hot"][:1], "cool": run["cool"]}, view, 0.0, verb=False)
    assert found is not None and found[0] == "cool"


def test_a_tolerant_pod_takes_the_hot_node_with_or_without_the_verb() -> None:
    for verb in (False, True):
        placement, run, view = hot_and_cool(started_on_hot=9.0)
        ocr = placed("ocr", "inference", 100_000, latency="tolerant")
        assert (placement.preemption(ocr, 100_000, run, view, 0.0, verb=verb) or ("",))[0] == "hot"


def test_a_pod_that_never_preempts_does_not() -> None:
    scenario = load_scenario(CONTENTION).with_changes(hours=1, warmup_hours=0)
    day = _Day(scenario, "gpupack")
    batch = placed("sweep", "batch", -100)
    batch.pod["spec"]["preemptionPolicy"] = "Never"
    assert day.preempt(batch, day.placement.view(day.live(0)), 0) is None


# what a victim loses -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "lost"), [(None, 70), (30, 10)])
def test_a_victim_loses_what_it_did_since_its_last_checkpoint(checkpoint: int | None, lost: int) -> None:
    pod = placed("job", "training", 10_000)
    pod.started, pod.checkpoint_steps = 100, checkpoint
    assert _Day.lost_steps(pod, 170) == lost


def test_a_victims_job_starts_again_with_the_work_it_had_not_saved() -> None:
    scenario = load_scenario(CONTENTION).with_changes(hours=1, warmup_hours=0)
    day = _Day(scenario, "gpupack")
    job = placed("finetune-00001", "training", 10_000)
    job.run_steps, job.started, job.checkpoint_steps = 120, 0, 30
    day.respawn(job, 70, _Day.lost_steps(job, 70))
    (again,) = day.pending.values()
    assert again.run_steps == 120 - 70 + 10 and again.pod["metadata"]["name"] == "finetune-00001-r1"
    assert again.checkpoint_steps == 30 and again.demand.key != job.demand.key


# the day ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contention() -> dict[str, Any]:
    return compare_preemption(load_scenario(CONTENTION).with_changes(hours=12), seeds=4)


def test_with_the_verb_no_victim_dies_for_nothing_on_the_contention_day(contention: dict[str, Any]) -> None:
    alone, verb = contention["runs"]["scheduler"], contention["runs"]["verb"]
    assert alone["wasted_victims"] > 0 and alone["wasted_gpu_hours_lost"] > 0
    assert verb["wasted_victims"] == 0 and verb["wasted_gpu_hours_lost"] == 0
    assert verb["victims"] < alone["victims"] and verb["gpu_hours_lost"] < alone["gpu_hours_lost"]


def test_the_runs_with_gpupack_answer_the_verb_by_default() -> None:
    scenario = load_scenario(CONTENTION).with_changes(hours=12)
    assert run_day(scenario, "gpupack") == run_day(scenario, "gpupack", preemption="verb")
    off = run_day(scenario, "gpupack", preemption="off").summary()
    assert off["victims"] == off["preemptions"] == 0


def test_the_comparison_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.yaml"
    small.write_text(CONTENTION.read_text().replace("hours: 24", "hours: 6"))
    assert main(["simulate", "--scenario", str(small), "--compare-preemption", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "killed for nothing (wasted)" in out and "with the preempt verb" in out and "seeds (42-43)" in out
    assert main(["simulate", "--scenario", str(small), "--compare-preemption", "--seeds", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seeds"] == [42, 43] and set(data["runs"]) == {"scheduler", "verb"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare-preemption"], "--compare-preemption cannot be used with the trace replay"),
        (["--scenario", str(CONTENTION), "--compare-preemption", "--seeds", "0"], "--seeds must be at least 1"),
        (["--scenario", str(CONTENTION), "--compare-preemption", "--plot", "x.png"], "--plot cannot be used"),
        (["--scenario", str(CONTENTION), "--seeds", "3"], "--seeds cannot be used with --scenario"),
    ],
)
def test_wrong_flags_are_refused_naming_them(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *argv]) == 2
    assert message in capsys.readouterr().err
