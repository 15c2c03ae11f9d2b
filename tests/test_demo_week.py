"""The demo's week (demo.week): nvidia-smi logs in the guide's (docs/method.md) format and a cluster file that `gpupack
report`
reads offline, with each planted problem found on the node or pod planted for it and on no other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpupack.cli import main
from gpupack.demo.cluster import NODES
from gpupack.demo.week import HEADER, STEP_SECONDS, WEEK_SECONDS, report_week, write_week

END = 1_796_040_000.0  # 2026-11-30T12:00:00Z


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    return write_week(tmp_path_factory.mktemp("week"), END)


@pytest.fixture(scope="module")
def document(week: tuple[list[Path], Path]) -> dict[str, Any]:
    logs, cluster = week
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", "--nvidia-smi", *map(str, logs), "--cluster", str(cluster), "--json"]) == 0
    return dict(json.loads(out.getvalue()))


def test_one_log_per_node_in_the_guides_format(week: tuple[list[Path], Path]) -> None:
    logs, _ = week
    assert sorted(p.stem for p in logs) == sorted(n["metadata"]["name"] for n in NODES)
    lines = (logs[0].parent / "h100-od-1.csv").read_text().splitlines()
    assert lines[0] + "\n" == HEADER and len(lines) == 1 + 8 * WEEK_SECONDS // STEP_SECONDS
    stamp, index, name, util, used, total = lines[1].split(", ")
    assert (index, name, total) == ("0", "NVIDIA H100 80GB HBM3", "81559 MiB")
    assert util.endswith(" %") and used.endswith(" MiB") and stamp.endswith(".000")
    mig = (logs[0].parent / "a100-mig-1.csv").read_text().splitlines()[1]
    assert ", [N/A], " in mig  # nvidia-smi reads no utilization in MIG mode


def test_the_window_is_the_week_the_logs_cover(document: dict[str, Any]) -> None:
    assert document["window"] == {"start": "2026-11-23T12:00:00Z", "end": "2026-11-30T12:00:00Z"}


def test_each_planted_problem_is_found_where_it_was_planted(document: dict[str, Any]) -> None:
    classes = {n["node"]: n["class"] for n in document["nodes"]}
    assert classes == {
        "a100-mig-1": "unknown",
        "a100-mig-2": "unknown",
        "a100-mig-3": "unknown",
        "h100-od-1": "hot",
        "h100-od-2": "idle",
        "h100-spot-1": "underused",
        "h100-spot-2": "idle",
        "t4-spot-1": "idle",
        "t4-ts-1": "idle",
        "t4-ts-2": "ok",
        "t4-ts-3": "ok",
    }
    found: dict[str, set[tuple[Any, ...]]] = {}
    for f in document["findings"]:
        found.setdefault(f["kind"], set()).add(
            (f["node"], f["gpu"], f["pod"], f["workload"], f["evidence"].get("reason"))
        )
    assert {n for n, *_ in found["memory-held-idle"]} == {"t4-ts-2"} and {
        g for _, g, *_ in found["memory-held-idle"]
    } == {"0"}
    assert {w for *_, w, _ in found["oversized-workload"]} == {
        "Deployment ml-serving/llm-serve",
        "Pod ml-serving/notebook-ana",
    }
    assert {(n, r) for n, _, _, _, r in found["scale-down-blocker"]} == {
        ("h100-od-2", "NotEnoughPdb"),
        ("h100-spot-2", "NotReplicated"),
    }
    assert {p for _, _, p, _, _ in found["inference-on-spot"]} == {"ml-serving/chat-canary-5d8f7b-0"}
    assert {w for *_, w, _ in found["shared-latency-critical"]} == {
        "Deployment ml-serving/ocr",
        "Deployment ml-serving/translate",
    }
    assert {n for n, *_ in found["unmeasured-node"]} == {"a100-mig-1", "a100-mig-2", "a100-mig-3"}
    assert "light-kernels" not in found and "mig-near-oom" not in found  # nvidia-smi has no engine or instances


def test_the_summary_and_the_savings_speak_the_guides_terms(document: dict[str, Any]) -> None:
    summary, savings = document["summary"], document["savings"]
    assert summary["gpu_util_mean"] < 30 and "do not add GPUs" in summary["advice"]
    assert (summary["nodes_idle"], summary["nodes_underused"], summary["nodes_hot"]) == (4, 5, 1)
    assert savings["gpu_nodes_now"] == 11 and savings["gpu_nodes_needed"] < 6
    assert savings["overloaded"] == [] and savings["unplaced"] == []
    assert savings["util_after"] > 2 * summary["gpu_util_mean"]
    assert savings["unmeasured_pods"] == 3  # the MIG pods nvidia-smi cannot measure


def test_the_demo_priced_with_the_example_prices_ends_with_the_week_in_money(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What `make run` passes: the summary says the prices are examples, and the last line prices the idle capacity
    # and the nodes packing empties, worked out here from the report's own numbers.
    prices = Path(__file__).resolve().parents[1] / "examples" / "prices.yaml"
    report_week(tmp_path, END, prices)
    out = capsys.readouterr().out
    assert "USD per GPU-hour: example prices, not quotes from any provider" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("== the week in money (example prices, not quotes from any provider): idle GPU capacity")
    logs, cluster = write_week(tmp_path / "again", END)
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        argv = ["report", "--nvidia-smi", *map(str, logs), "--cluster", str(cluster), "--prices", str(prices), "--json"]
        assert main(argv) == 0
    data = json.loads(buffer.getvalue())
    idle, removable = data["summary"]["idle_cost"], data["savings"]["removable_cost"]
    assert idle > 0 and removable > 0 and data["summary"]["prices_note"].startswith("example prices")
    assert f"cost USD {idle:,.2f} over 168 h" in last and f"bill USD {removable:,.2f} in that time" in last


def test_the_demo_refuses_a_bad_prices_file_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("currency: USD\ngpus: []\n")
    assert main(["demo", "--workdir", str(tmp_path / "run"), "--prices", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "prices.yaml: gpus" in err and not (tmp_path / "run").exists()
