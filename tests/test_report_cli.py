"""`gpupack report` end to end on files: nvidia-smi logs and `kubectl get -o json` output, the three outputs, the
before/after verdict, and errors that name what could not be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupack.cli import main
from gpupack.testing.net import free_port, write_kubeconfig
from tests.report_cluster_kit import node, pod

START = 1_796_032_800.0  # 2026-11-30T10:00:00Z
HEADER = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"


def _stamp(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y/%m/%d %H:%M:%S.000")


def write_log(path: Path, util: float, days: int = 2, memory: float = 1000.0, start: float = START) -> Path:
    """Two GPUs sampled every 10 minutes at `util` percent."""
    rows = [
        f"{_stamp(start + step * 600)}, {index}, NVIDIA A100-SXM4-40GB, {util:g} %, {memory:g} MiB, 40960 MiB\n"
        for step in range(days * 144)
        for index in (0, 1)
    ]
    path.write_text(HEADER + "".join(rows))
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    logs = {name: write_log(tmp_path / f"{name}.csv", util) for name, util in (("idle", 4), ("under", 20), ("hot", 95))}
    objects = [node(n, 2) for n in logs] + [pod("keep-x", "idle", owner=None)]
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return {**logs, "cluster": cluster}


def test_json_from_logs_and_a_cluster_file(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    logs = [str(files[n]) for n in ("idle", "under", "hot")]
    assert main(["report", "--nvidia-smi", *logs, "--cluster", str(files["cluster"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["window"] == {"start": "2026-11-30T10:00:00Z", "end": "2026-12-02T10:00:00Z"}
    assert {n["node"]: n["class"] for n in doc["nodes"]} == {"hot": "hot", "idle": "idle", "under": "underused"}
    assert doc["summary"]["gpu_util_mean"] == pytest.approx(39.7, abs=0.05)
    found = {(f["kind"], f["node"], f["evidence"].get("reason")) for f in doc["findings"]}
    assert ("idle-node", "idle", None) in found and ("scale-down-blocker", "idle", "NotReplicated") in found
    assert "do not add GPUs" not in doc["summary"]["advice"]  # the mean is above 30 %
    # no GPU pod in the cluster file: the replay needs no GPU node, all three (2 GPUs each, 48 h) could go
    assert doc["savings"] == {
        "gpu_nodes_now": 3,
        "gpu_nodes_needed": 0,
        "removable": ["hot", "idle", "under"],
        "removable_gpu_hours": 288.0,
        "removable_cost": None,
        "unplaced": [],
        "util_after": None,
        "overloaded": [],
        "unmeasured_pods": 0,
    }


def test_the_terminal_and_the_html_page(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    logs = [str(files[n]) for n in ("idle", "under", "hot")]
    assert main(["report", "--nvidia-smi", *logs, "--cluster", str(files["cluster"])]) == 0
    text = capsys.readouterr().out
    assert "idle-node" in text and "underused" in text and "hot" in text
    page = files["cluster"].parent / "report.html"
    assert main(["report", "--nvidia-smi", *logs, "--html", str(page)]) == 0
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html


def test_before_and_after_give_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two days at 20 % on two GPUs, then two days at 65 %: the guide's (docs/method.md) 'from about 20 % to 60 %'."""
    before = write_log(tmp_path / "a.csv", 20, days=2)
    text = before.read_text()
    after = write_log(tmp_path / "b.csv", 65, days=2, start=START + 2 * 86400)
    (tmp_path / "n.csv").write_text(text + after.read_text().split("\n", 1)[1])
    args = ["report", "--nvidia-smi", f"n={tmp_path / 'n.csv'}", "--json"]
    before_span, after_span = "2026-11-30T10:00:00Z..2026-12-02T10:00:00Z", "2026-12-02T10:00:00Z..2026-12-04T10:00:00Z"
    assert main([*args, "--before", before_span, "--after", after_span]) == 0
    compare = json.loads(capsys.readouterr().out)["compare"]
    assert compare["before"]["gpu_util_mean"] == 20.0 and compare["after"]["gpu_util_mean"] == 65.0
    assert compare["effective"] is True and "rose from 20 % to 65 %" in compare["verdict"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--before", "2026-11-30..2026-12-01"], "--before and --after go together"),
        (["--window", "7x"], "'7x' is not a duration"),
        (["--end", "yesterday"], "'yesterday' is not a time"),
        (["--idle", "50", "--underused", "30"], "thresholds must hold"),
        (["--work-query", "sum(x)"], "--work-query needs --prometheus-url"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    assert main(["report", "--nvidia-smi", str(files["idle"]), *extra]) == 2
    assert said in capsys.readouterr().err


def test_a_bad_log_or_cluster_file_is_named(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["idle"].write_text(HEADER + "garbage\n")
    assert main(["report", "--nvidia-smi", str(files["idle"])]) == 2
    assert "idle.csv:2" in capsys.readouterr().err
    files["cluster"].write_text("{not json")
    assert main(["report", "--nvidia-smi", str(files["hot"]), "--cluster", str(files["cluster"])]) == 2
    assert "cluster.json: not JSON" in capsys.readouterr().err


def test_an_api_server_that_does_not_answer_is_one_line_naming_the_list(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", free_port())
    assert main(["report", "--nvidia-smi", str(files["idle"]), "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err  # urllib3 logs its retries before; the command's own word is the last line
    assert err.splitlines()[-1] == "gpupack report: LIST nodes: no answer: Connection refused"
