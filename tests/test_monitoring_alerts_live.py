"""The shipped rules in a real Prometheus over 8 planted days of DCGM, kube-state-metrics and gpupack series
(`tests.monitoring_history`), the recording rules backfilled by `promtool tsdb create-blocks-from rules`: the
alerts the planted world calls for are active through the Prometheus API, on the node, GPU or pod planted for
them, and the others are not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpupack.monitoring.build import RULE_FILE
from gpupack.monitoring.rules import alert_names
from tests.monitoring_history import HAVE_PROMETHEUS, MISSING, PLANTED, get, monitoring_prometheus

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(not HAVE_PROMETHEUS, reason=MISSING)]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with monitoring_prometheus(tmp_path_factory.mktemp("alerts"), [RULE_FILE], now=time.time()) as url:
        yield url


@pytest.fixture(scope="module")
def alerts(prometheus: str) -> list[dict[str, Any]]:
    """The active alerts (pending or firing) once every alert group has been evaluated."""
    deadline = time.monotonic() + 60
    while True:
        groups = get(prometheus, "/api/v1/rules", type="alert")["groups"]
        evaluated = all(rule.get("lastEvaluation", "").startswith("20") for g in groups for rule in g["rules"])
        if evaluated or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    found: list[dict[str, Any]] = get(prometheus, "/api/v1/alerts")["alerts"]
    return found


def test_the_planted_alerts_are_active_and_the_others_are_not(alerts: list[dict[str, Any]]) -> None:
    assert PLANTED.alerts_active | PLANTED.alerts_silent == set(alert_names())
    assert {a["labels"]["alertname"] for a in alerts} == PLANTED.alerts_active


def _subjects(alerts: list[dict[str, Any]], name: str, *labels: str) -> set[tuple[str, ...]]:
    return {tuple(a["labels"].get(label, "") for label in labels) for a in alerts if a["labels"]["alertname"] == name}


def test_each_alert_is_on_what_was_planted_for_it(alerts: list[dict[str, Any]]) -> None:
    assert _subjects(alerts, "GPUNodeHot", "node") == {("hot-1",)}
    assert _subjects(alerts, "GPUNodeIdle", "node") == {("idle-1",)}
    assert _subjects(alerts, "GPUNodeUnderused", "node") == {("under-1",)}  # idle-1 is idle, not both
    assert _subjects(alerts, "GPUMemoryHeldIdle", "node", "gpu") == {("held-1", "0")}
    assert _subjects(alerts, "MIGInstanceNearOOM", "node", "gpu", "GPU_I_PROFILE") == {("mig-1", "0", "3g.40gb")}
    assert _subjects(alerts, "GPUXidErrors", "node", "gpu") == {("xid-1", "0")}
    assert _subjects(alerts, "GPUPodsPending", "namespace", "pod") == {("ml", "pending-0")}
    assert _subjects(alerts, "GpupackCertificateExpiringSoon", "job") == {("gpupack-webhook",)}
    # Alerts without a `for` fire at once; the others wait for theirs (alerts are not backfilled).
    states = {a["labels"]["alertname"]: a["state"] for a in alerts}
    assert states["GPUNodeIdle"] == states["GPUXidErrors"] == states["GpupackCertificateExpiringSoon"] == "firing"
    assert states["GPUNodeHot"] == states["GpupackWebhookDown"] == "pending"


def test_the_weekly_classes_read_the_backfilled_week(prometheus: str) -> None:
    """The hourly recording rule over the whole week exists only because promtool backfilled it."""
    result = get(prometheus, "/api/v1/query", query="count_over_time(gpupack:node_gpu_utilization:avg1h[7d])")
    counts = {r["metric"]["node"]: float(r["value"][1]) for r in result["result"]}
    assert counts["idle-1"] >= 6 * 24 * 12  # every 5 m for (at least) six of the seven days
    mean = get(
        prometheus, "/api/v1/query", query='avg_over_time(gpupack:node_gpu_utilization:avg1h{node="idle-1"}[7d])'
    )
    assert float(mean["result"][0]["value"][1]) == pytest.approx(
        PLANTED.node("idle-1").mean_utilization(7 * 86400), abs=0.5
    )


def test_no_rule_fails_to_evaluate(prometheus: str, alerts: list[dict[str, Any]]) -> None:
    for group in get(prometheus, "/api/v1/rules")["groups"]:
        for rule in group["rules"]:
            assert rule["health"] != "err", f"{rule['name']}: {rule.get('lastError')}"
