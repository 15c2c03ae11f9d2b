"""The Prometheus forecast against a real Prometheus: eight days of kube-state-metrics series backfilled with
promtool, pods coming and going, and the peak per MIG profile the planner reads from them."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupack.cli import main
from gpupack.migplan.forecast import KSM_TO_RESOURCE, ksm_name, prometheus_forecast
from gpupack.report.prometheus import PrometheusUsage
from gpupack.testing.history import PROMETHEUS, PROMTOOL, PrometheusServer, backfill
from tests.conftest import ROOT

H = 3600.0
D = 24 * H
NOW = (time.time() // 3600) * 3600
M = "nvidia.com/mig-"


@dataclass(frozen=True)
class Planted:
    pod: str
    phase: str
    start: float
    """Seconds before NOW."""
    end: float
    requests: tuple[tuple[str, str, int], ...]
    """(container, kube-state-metrics resource, amount)."""


PODS = (
    # two containers of one pod, one 1g.5gb each, for seven days: 2 all along
    Planted("embed-0", "Running", 7 * D, 1 * D, (("a", "nvidia_com_mig_1g_5gb", 1), ("b", "nvidia_com_mig_1g_5gb", 1))),
    # two one-hour-overlapping pods three days ago: 2 + 2 = 4 1g.5gb for that hour only
    Planted("embed-1", "Running", 3 * D, 3 * D - 2 * H, (("a", "nvidia_com_mig_1g_5gb", 1),)),
    Planted("embed-2", "Running", 3 * D - 1 * H, 3 * D - 3 * H, (("a", "nvidia_com_mig_1g_5gb", 1),)),
    # pending for the last day: it counts, that is what it waits for
    Planted("rerank-0", "Pending", 1 * D, 0, (("a", "nvidia_com_mig_3g_20gb", 1),)),
    # finished: not demand
    Planted("chat-done", "Succeeded", 5 * D, 4 * D, (("a", "nvidia_com_mig_2g_10gb", 3),)),
    # before the 7-day window
    Planted("old", "Running", 8 * D, 7.5 * D, (("a", "nvidia_com_mig_4g_20gb", 1),)),
    # a media-extension profile gpupack does not plan, and a non-MIG resource
    Planted("video-0", "Running", 2 * D, 0, (("a", "nvidia_com_mig_1g_10gb_me", 1), ("a", "nvidia_com_gpu", 2))),
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def write_history(path: Path) -> None:
    lines = ["# TYPE kube_pod_container_resource_requests gauge", "# TYPE kube_pod_status_phase gauge"]
    requests, phases = [], []
    for p in PODS:
        times = range(int(NOW - p.start), int(NOW - p.end) + 1, 60)
        for replica in ("ksm-0", "ksm-1"):  # an HA pair of kube-state-metrics: every series twice
            base = f'namespace="ml",pod="{p.pod}",job="kube-state-metrics",instance="{replica}"'
            for t in times:
                for container, resource, n in p.requests:
                    labels = f'{base},container="{container}",resource="{resource}",unit="integer"'
                    requests.append(f"kube_pod_container_resource_requests{{{labels}}} {n} {t}")
                phases += [f'kube_pod_status_phase{{{base},phase="{ph}"}} {int(ph == p.phase)} {t}' for ph in PHASES]
    path.write_text("\n".join([lines[0], *requests, lines[1], *phases, "# EOF", ""]))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()):
        pytest.skip(f"no {PROMETHEUS} / {PROMTOOL} (`make test` installs Debian's `prometheus`)")
    workdir = tmp_path_factory.mktemp("forecast")
    text = workdir / "ksm.om"
    write_history(text)
    backfill(text, workdir / "tsdb", block_hours=162)
    with PrometheusServer(workdir / "tsdb", oldest=NOW - 9 * D) as server:
        yield server.url
    shutil.rmtree(workdir, ignore_errors=True)


def test_the_peak_per_profile_over_the_window_counts_unfinished_pods_only(prometheus: str) -> None:
    source = PrometheusUsage(prometheus)
    try:
        assert prometheus_forecast(source, "7d", NOW) == {M + "1g.5gb": 4, M + "3g.20gb": 1}
        # the last two days: only embed-0's 2 (until a day ago) and the pending rerank
        assert prometheus_forecast(source, "2d", NOW) == {M + "1g.5gb": 2, M + "3g.20gb": 1}
        # ending four days ago: before the overlap and the pending pod
        assert prometheus_forecast(source, "3d", NOW - 4 * D) == {M + "1g.5gb": 2}
    finally:
        source.close()


def test_kube_state_metrics_names_map_back_to_every_catalog_profile() -> None:
    assert ksm_name("1g.5gb") == "nvidia_com_mig_1g_5gb"
    assert KSM_TO_RESOURCE["nvidia_com_mig_3g_40gb"] == M + "3g.40gb"
    assert "nvidia_com_mig_1g_10gb_me" not in KSM_TO_RESOURCE


def test_the_command_serves_the_forecast_peak(prometheus: str, capsys: pytest.CaptureFixture[str]) -> None:
    day = ROOT / "scenarios" / "synthetic-day.yaml"
    forecast = ["--prometheus-url", prometheus, "--window", "7d", "--end", str(NOW)]
    code = main(["mig-plan", "--scenario", str(day), "--demand-hours", "0.1", *forecast, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["demand"][M + "3g.20gb"] >= 1 and doc["source"].endswith(f"peak of 7d from {prometheus}")


def test_a_prometheus_that_is_down_or_a_bad_window_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    day = str(ROOT / "scenarios" / "synthetic-day.yaml")
    assert main(["mig-plan", "--scenario", day, "--prometheus-url", "http://127.0.0.1:9", "--window", "7d"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpupack mig-plan: Prometheus http://127.0.0.1:9") and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as refused:  # argparse checks the duration before anything runs
        main(["mig-plan", "--scenario", day, "--prometheus-url", "http://127.0.0.1:9", "--window", "soon"])
    assert refused.value.code == 2 and "is not a duration" in capsys.readouterr().err
