"""`gpupack mig-plan` end to end: on the synthetic day, on the recorded cluster, on a cluster whose labelled pods the
webhook sizes again, with a forecast file, and with the inputs it must refuse."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupack.cli import main
from gpupack.core.admitted import admitted_pod
from gpupack.core.policy import Policy
from gpupack.demo.cluster import NODES
from gpupack.migplan.demand import cluster_demand, mig_nodes
from gpupack.report.cluster import from_objects
from gpupack.simulator.day.scenario import load_scenario, replicas_at
from tests.conftest import RECORDED, ROOT

DAY = ROOT / "scenarios" / "synthetic-day.yaml"
LABEL_VALUE = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
M = "nvidia.com/mig-"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["mig-plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def peak(hours: float, names: set[str]) -> int:
    """Independent of the planner: the peak replicas of the named Deployments over the first hours, minute by minute."""
    scenario = load_scenario(DAY)
    workloads = [w for w in scenario.inference if w.name in names]
    return max(sum(replicas_at(w, m / 60, 1.0) for w in workloads) for m in range(int(hours * 60)))


def test_the_synthetic_day_plan_sizes_replicas_like_the_webhook_and_serves_the_first_hours(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_file = tmp_path / "mig.yaml"
    code, out, _ = run(["--scenario", str(DAY), "--json", "--output", str(out_file)], capsys)
    assert code == 0
    doc = json.loads(out)
    # embeddings (4Gi) -> 1g.5gb; chat-7b (8Gi) -> 1g.10gb, the smallest with 8Gi once it is offered (it had
    # 2g.10gb under all-balanced); rerank-13b (16Gi) -> 3g.20gb; llm-70b (40Gi) -> a whole GPU, not a 7g instance
    assert doc["demand"] == {
        M + "1g.10gb": peak(6, {"chat-7b"}),
        M + "1g.5gb": peak(6, {"embeddings"}),
        M + "3g.20gb": peak(6, {"rerank-13b"}),
    }
    assert doc["unserved"] == {} and doc["kept_busy"] == []
    assert doc["gpus_needed"] <= 16 and doc["nodes_needed"] == len([n for n in doc["nodes"]])
    config = yaml.safe_load(out_file.read_text())
    assert config["version"] == "v1"
    for node in doc["nodes"]:
        assert re.fullmatch(LABEL_VALUE, node["config"])
        assert node["config"] == "all-balanced" or node["config"] in config["mig-configs"]
        assert sum(node["instances"].values()) == sum(sum(g.values()) for g in node["gpus"])


def test_fill_gives_every_free_mig_node_a_layout_and_text_names_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["--scenario", str(DAY), "--fill"], capsys)
    assert code == 0
    assert "needs " in out and "of 6 MIG nodes" in out
    commands = re.findall(r"kubectl label node (a100-mig-\d) nvidia.com/mig.config=(\S+) --overwrite", out)
    assert {node for node, _ in commands} == {f"a100-mig-{i}" for i in range(1, 7)}
    assert "version: v1" in out


def test_the_recorded_cluster_runs_gpu_pods_on_both_mig_nodes_so_nothing_is_touched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = [str(RECORDED / "nodes.json"), str(RECORDED / "pods-after-scheduling.json")]
    code, out, _ = run(["--cluster", *files, "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["kept_busy"] == ["a100-od-1", "a100-od-2"]
    assert doc["nodes"] == [] and doc["gpus_needed"] == 0
    # their pods ask 1x 2g.10gb and 1x 1g.5gb, which the busy nodes already offer
    assert doc["demand"] == {M + "1g.5gb": 1, M + "2g.10gb": 1}
    code, out, _ = run(["--cluster", *files, "--json", "--include-busy-nodes"], capsys)
    doc = json.loads(out)
    assert doc["kept_busy"] == [] and doc["gpus_needed"] == 1


def _cluster_with_labelled_pods() -> dict[str, Any]:
    pending = admitted_pod("chat-1", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "8Gi"})
    pending["metadata"]["namespace"] = "ml"
    pending["status"] = {"phase": "Pending"}
    running = admitted_pod("embed-1", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "4Gi"})
    running["spec"]["nodeName"] = "a100-mig-1"
    running["spec"]["containers"][0]["resources"] = {"limits": {M + "1g.5gb": "1"}, "requests": {M + "1g.5gb": "1"}}
    running["status"] = {"phase": "Running"}
    done = admitted_pod("old", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "16Gi"})
    done["status"] = {"phase": "Succeeded"}
    plain = admitted_pod("notebook", {})
    plain["spec"]["containers"][0]["resources"] = {"limits": {M + "3g.20gb": "1"}}
    plain["status"] = {"phase": "Pending"}
    items = [{**n, "kind": "Node"} for n in NODES] + [{**p, "kind": "Pod"} for p in (pending, running, done, plain)]
    return {"kind": "List", "apiVersion": "v1", "items": items}


def test_labelled_pods_are_sized_again_by_the_webhook_and_finished_ones_do_not_count() -> None:
    cluster = from_objects(_cluster_with_labelled_pods()["items"])
    policy = Policy()
    nodes, skipped = mig_nodes(cluster, policy)
    assert skipped == {}
    assert [(n.name, n.free) for n in nodes] == [("a100-mig-1", False), ("a100-mig-2", True), ("a100-mig-3", True)]
    # the 8Gi chat pod: 1g.10gb (offered once the layout may change), not the 2g.10gb all-balanced forces;
    # the unlabelled notebook counts what it asks (a limit is its request)
    assert cluster_demand(cluster, policy, nodes).mig == {M + "1g.10gb": 1, M + "1g.5gb": 1, M + "3g.20gb": 1}


def test_a_forecast_raises_the_demand_per_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(_cluster_with_labelled_pods()))
    forecast = tmp_path / "forecast.yaml"
    forecast.write_text("1g.10gb: 12\nnvidia.com/mig-3g.20gb: 0\n")
    code, out, _ = run(["--cluster", str(cluster), "--demand", str(forecast), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["demand"] == {M + "1g.10gb": 12, M + "1g.5gb": 1, M + "3g.20gb": 1}
    assert doc["kept_busy"] == ["a100-mig-1"]
    assert all(n["node"] != "a100-mig-1" for n in doc["nodes"])
    # the busy node's all-balanced instances serve the 1g.5gb and the 3g.20gb; 12x 1g.10gb at 4 per A100-40GB
    assert doc["gpus_needed"] == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2g.10gb: many\n", "not a whole number of instances"),
        ("9g.99gb: 1\n", "is not a MIG profile"),
        ("- 1g.5gb\n", "expected a mapping"),
        ("{1g.5gb: -2}\n", "not a whole number"),
        ("1g.5gb: [\n", "not YAML"),
    ],
)
def test_a_bad_forecast_is_one_line_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    forecast = tmp_path / "forecast.yaml"
    forecast.write_text(text)
    code, out, err = run(["--scenario", str(DAY), "--demand", str(forecast)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("gpupack mig-plan: ") and str(forecast) in err and message in err
    assert len(err.strip().splitlines()) == 1


def test_unserved_demand_exits_1_and_says_what(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    forecast = tmp_path / "forecast.yaml"
    forecast.write_text("3g.20gb: 500\n")
    code, out, _ = run(["--scenario", str(DAY), "--demand", str(forecast)], capsys)
    assert code == 1
    assert "cannot serve: " in out
    code, out, _ = run(["--scenario", str(DAY), "--demand", str(forecast), "--json"], capsys)
    doc = json.loads(out)
    # 48 GPUs, 384 memory slices: 42x 1g.5gb and 14x 1g.10gb take 70, which leaves 78 3g.20gb (4 slices each)
    # and 2 slices; or one 1g.10gb fewer and 79. Either way 134 instances are served and 422 are not.
    assert code == 1 and doc["gpus_needed"] == 48
    assert sum(doc["unserved"].values()) == 14 + 42 + 500 - 134
    assert M + "1g.5gb" not in doc["unserved"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", str(DAY), "--apply"], "--apply needs a cluster"),
        (["--cluster", str(RECORDED / "nodes.json"), "--apply"], "--apply needs a live cluster"),
        (["--scenario", str(DAY), "--max-unavailable", "3"], "fraction"),
        (["--scenario", str(DAY), "--demand", "/dev/zero"], "larger than 1048576 bytes"),
        (["--scenario", str(DAY), "--demand", "/"], "--demand /: Is a directory"),
        (["--scenario", str(DAY), "--demand-hours", "1e308"], "the scenario's day has 24 hours"),
        (["--scenario", str(DAY), "--mig-config-map", "noslash"], "write NAMESPACE/NAME"),
        (["--scenario", str(DAY), "--window", "soon"], "is not a duration"),
        (["--scenario", str(DAY), "--compare", "--jobs", "0"], "--jobs must be at least 1"),
        (["--cluster", str(RECORDED / "nodes.json"), "--compare"], "--compare runs a scenario's day"),
    ],
)
def test_options_that_cannot_work_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        code, _, err = run(argv, capsys)
    except SystemExit as exc:  # argparse's own refusal of a flag's value
        code, err = int(str(exc.code)), capsys.readouterr().err
    assert code == 2 and message in err
    assert "Traceback" not in err


def test_a_pod_bound_to_a_node_that_keeps_its_layout_counts_what_it_holds() -> None:
    """Sized again it would ask a 1g.10gb while still holding its 2g.10gb: a whole node reconfigured for nothing."""
    chat = admitted_pod("chat-0", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "8Gi"})
    chat["spec"]["nodeName"] = "a100-mig-1"
    chat["spec"]["containers"][0]["resources"] = {"limits": {M + "2g.10gb": "1"}}
    chat["status"] = {"phase": "Running"}
    cluster = from_objects([{**n, "kind": "Node"} for n in NODES] + [{**chat, "kind": "Pod"}])
    policy = Policy()
    nodes, _ = mig_nodes(cluster, policy)
    assert cluster_demand(cluster, policy, nodes).mig == {M + "2g.10gb": 1}
    # drained (--include-busy-nodes), it is created again and sized again
    drained = [replace(n, free=True) for n in nodes]
    assert cluster_demand(cluster, policy, drained).mig == {M + "1g.10gb": 1}


def test_nodes_with_mig_off_are_left_to_whole_gpu_pods_unless_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    whole = {**NODES[0], "metadata": {**NODES[0]["metadata"], "name": "a100-whole"}}
    whole["metadata"]["labels"] = {**whole["metadata"]["labels"], "nvidia.com/mig.config": "all-disabled"}
    whole["status"] = {"allocatable": {"cpu": "94", "memory": "900Gi", "nvidia.com/gpu": "8"}}
    train = admitted_pod("train-0", {"gpupack.io/workload": "training", "gpupack.io/gpus": "8"})
    train["status"] = {"phase": "Pending"}
    embed = admitted_pod("embed-0", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "4Gi"})
    embed["status"] = {"phase": "Pending"}
    items = [{**whole, "kind": "Node"}, {**train, "kind": "Pod"}, {**embed, "kind": "Pod"}]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    code, out, _ = run(["--cluster", str(path), "--json"], capsys)
    doc = json.loads(out)
    assert doc["not_planned"] == {"a100-whole": "MIG off (whole GPUs); --include-whole-gpu-nodes plans it"}
    # no MIG node to plan: the webhook would give the 4Gi pod a whole GPU too, beside the training pod's 8
    assert code == 0 and doc["whole_gpus_pending"] == 9 and doc["demand"] == {} and doc["nodes"] == []
    code, out, _ = run(["--cluster", str(path), "--json", "--include-whole-gpu-nodes"], capsys)
    doc = json.loads(out)
    assert code == 0 and [n["node"] for n in doc["nodes"]] == ["a100-whole"]
    assert doc["demand"] == {M + "1g.5gb": 1} and doc["whole_gpus_pending"] == 8
