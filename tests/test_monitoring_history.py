"""The monitoring fixture itself (`tests/monitoring_history.py`): a real Prometheus over the planted 8 days answers
raw queries with the values worked out by hand from `PLANTED`, and, once gpupack's rules file is on the branch, its
recording rules are backfilled over the week and evaluated live.

Every query is evaluated at the fixture's last sample (`minute(now)` of when it was built: `Live.end`) or before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from tests.monitoring_history import (
    HAVE_PROMETHEUS,
    HISTORY,
    MIG_40GB_FB,
    MISSING,
    PLANTED,
    D,
    H,
    M,
    Signal,
    get,
    minute,
    monitoring_prometheus,
    rule_levels,
    sample_times,
    seconds,
)

pytestmark = [pytest.mark.skipif(not HAVE_PROMETHEUS, reason=MISSING), pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "manifests" / "monitoring" / "prometheus" / "gpupack-rules.yaml"
NO_RULES = f"{RULES.relative_to(ROOT)} is not on this branch yet (the rules are written on another branch)"
WEEK_LONG = (
    "gpupack:gpu_utilization:avg5m",
    "gpupack:node_gpu_utilization:avg5m",
    "gpupack:node_gpu_utilization:avg1h",
    "gpupack:gpu_memory_used:ratio",
    "gpupack:mig_memory_used:ratio",
    "gpupack:node_gpu_requested:sum",
    "gpupack:node_gpu_allocatable:sum",
)
"""Records the dashboards read whose planted inputs span the whole history."""
PENDING = ("gpupack:gpu_pods_pending:count", "gpupack:gpu_pod_pending")
"""Records of the pending pods, which exist for the last 30 minutes only."""


class Live(NamedTuple):
    url: str
    end: float
    """The last sample's time."""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    rules = [RULES] if RULES.exists() else []
    now = time.time()  # here, not at import: the world is current for ~4 minutes after it
    with monitoring_prometheus(tmp_path_factory.mktemp("monitoring"), rules, now=now) as url:
        yield Live(url, minute(now))


def query(live: Live, expr: str, ago: float = 0.0) -> list[dict[str, Any]]:
    """The instant vector of `expr` `ago` seconds before the last sample."""
    result: list[dict[str, Any]] = get(live.url, "/api/v1/query", query=expr, time=str(live.end - ago))["result"]
    return result


def values(live: Live, expr: str, *by: str, ago: float = 0.0) -> dict[tuple[str, ...], float]:
    """The instant vector's values keyed by the `by` labels."""
    return {tuple(r["metric"].get(b, "") for b in by): float(r["value"][1]) for r in query(live, expr, ago)}


def scalar(live: Live, expr: str, ago: float = 0.0) -> float:
    (only,) = values(live, expr, ago=ago).values()
    return only


# the history as written ----------------------------------------------------------------------------------------


def test_samples_every_5_min_then_every_minute_for_the_last_6_h_ending_at_now_rounded_down() -> None:
    now = 1_796_000_123.4
    end = minute(now)
    times = sample_times(now)
    assert end == 1_796_000_100 and times[0] == end - HISTORY and times[-1] == end
    assert set(times[1:] - times[:-1]) == {60.0, 300.0}
    assert list(times[-361:]) == [end - 6 * H + 60 * i for i in range(361)]
    # 8 days less 6 hours at 5 min (2,232 samples), then 361 at 1 min.
    assert len(times) == 2232 + 361


def test_signals_are_steps_back_from_now() -> None:
    hot = Signal(50).then(95, last=30 * M)
    assert (hot.at(), hot.at(30 * M), hot.at(30 * M + 1)) == (95, 95, 50)
    assert hot.mean(H) == 72.5 and hot.mean(10 * M) == 95
    assert Signal(60).then(2, last=2 * H).then(0, last=M).mean(3 * H) == pytest.approx((60 * 60 + 2 * 119) / 180)
    with pytest.raises(ValueError, match="oldest first"):
        Signal(1).then(2, last=M).then(3, last=H)


def test_the_planted_facts_the_alert_test_reads() -> None:
    assert PLANTED.node("hot-1").utilization() == 95 and PLANTED.node("hot-1").utilization(ago=H) == 50
    assert PLANTED.node("hot-1").mean_utilization(7 * D) == pytest.approx(50 + 45 * 30 * M / (7 * D))
    assert PLANTED.node("idle-1").mean_utilization(7 * D) == 5
    assert PLANTED.node("under-1").mean_utilization(7 * D) == 20
    assert PLANTED.node("mig-1").utilization() == 50  # GPU 0 (3 * 50 + 4 * 50) / 7, GPU 1 50
    assert PLANTED.node("held-1").utilization() == 36 and PLANTED.node("held-1").utilization(ago=3 * H) == 65
    held = PLANTED.node("held-1").devices[0]
    assert held.memory_used() == pytest.approx(0.9, abs=1e-4) and held.util is not None and held.util.at() == 2
    near_oom = PLANTED.node("mig-1").devices[0]
    assert near_oom.mig == ("3g.40gb", 1) and near_oom.memory_used() == pytest.approx(0.95, abs=1e-4)
    assert PLANTED.pending_gpu_pods == ("ml/pending-0",)
    assert PLANTED.empty_gpu_nodes == ("idle-1", "under-1", "xid-1")  # ml/done-0 on idle-1 has finished
    assert PLANTED.requested("mig-1") == {"nvidia_com_mig_3g_40gb": 1, "nvidia_com_mig_4g_40gb": 1, "nvidia_com_gpu": 1}
    assert PLANTED.webhook.up() == 0 and PLANTED.webhook.up(ago=11 * M) == 1 and PLANTED.extender.up() == 1
    assert not PLANTED.alerts_active & PLANTED.alerts_silent
    assert len(PLANTED.alerts_active | PLANTED.alerts_silent) == 15


# DCGM -------------------------------------------------------------------------------------------------------------

UTIL = "DCGM_FI_DEV_GPU_UTIL"


def test_gpu_util_under_either_host_label_with_the_recent_changes(live: Live) -> None:
    assert values(live, f'{UTIL}{{Hostname="hot-1"}}', "gpu") == {("0",): 95, ("1",): 95}
    assert values(live, f'{UTIL}{{Hostname="hot-1"}}', "gpu", ago=H) == {("0",): 50, ("1",): 50}
    # [end - 1 h, end] holds 61 samples; the 31 from end - 30 m on are at 95: (31 * 95 + 30 * 50) / 61.
    assert scalar(live, f'avg_over_time({UTIL}{{Hostname="hot-1", gpu="0"}}[1h])') == pytest.approx(
        (31 * 95 + 30 * 50) / 61
    )
    # idle-1 at 5 % in the coarse days too, where samples are 5 min apart.
    assert scalar(live, f'avg_over_time({UTIL}{{Hostname="idle-1", gpu="1"}}[1d])', ago=7 * D) == 5
    # mig-1 (`hostname`) has GPU_UTIL on its whole GPU only.
    assert values(live, f'{UTIL}{{hostname="mig-1"}}', "gpu") == {("1",): 50}
    nodes = set(values(live, f"count by (Hostname, hostname) ({UTIL})", "Hostname", "hostname"))
    assert nodes == {(n.name, "") if n.host_label == "Hostname" else ("", n.name) for n in PLANTED.gpu_nodes}
    held = f'{UTIL}{{Hostname="held-1", gpu="0"}}'
    assert scalar(live, held) == 2 and scalar(live, held, ago=2 * H + M) == 60


def test_mig_instances_have_engine_activity_and_40448_mib_each(live: Live) -> None:
    mig = '{hostname="mig-1", GPU_I_ID!=""}'
    used, free = f"DCGM_FI_DEV_FB_USED{mig}", f"DCGM_FI_DEV_FB_FREE{mig}"
    assert values(live, f"{used} + {free}", "GPU_I_PROFILE", "GPU_I_ID") == {
        ("3g.40gb", "1"): MIG_40GB_FB,
        ("4g.40gb", "2"): MIG_40GB_FB,
    }
    assert values(live, f"{used} / ({used} + {free})", "GPU_I_PROFILE") == pytest.approx(
        {("3g.40gb",): 38426 / 40448, ("4g.40gb",): 4045 / 40448}
    )
    engine = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="mig-1"}'
    # GPU 0's instances and GPU 1, each mapped by the exporter to its pod.
    assert values(live, engine, "gpu", "GPU_I_ID", "pod") == {
        ("0", "1", "chat-0"): 0.5,
        ("0", "2", "embed-0"): 0.5,
        ("1", "", "batch-0"): 0.5,
    }


def test_xid_79_for_the_last_5_minutes_on_one_gpu(live: Live) -> None:
    xid = "DCGM_FI_DEV_XID_ERRORS > 0"
    assert values(live, xid, "Hostname", "gpu") == {("xid-1", "0"): 79}
    assert query(live, xid, ago=6 * M) == []
    assert scalar(live, "count(DCGM_FI_DEV_XID_ERRORS)") == 14  # every whole GPU, no MIG instance


# kube-state-metrics ------------------------------------------------------------------------------------------------


def test_allocatable_gpus_and_the_spot_label(live: Live) -> None:
    assert values(live, 'kube_node_status_allocatable{resource=~"nvidia_com_.+"}', "node", "resource") == {
        (n.name, r): a for n in PLANTED.nodes for r, a in n.allocatable.items()
    }
    assert scalar(live, 'sum(kube_node_status_allocatable{resource="nvidia_com_gpu"})') == 14
    assert values(live, 'kube_node_status_allocatable{node="cpu-1"}', "resource", "unit") == {
        ("cpu", "core"): 32,
        ("memory", "byte"): 128 * 1024**3,
        ("pods", "integer"): 110,
    }
    assert values(live, 'kube_node_labels{label_node_type="spot"}', "node") == {("spot-1",): 1}
    assert scalar(live, "count(kube_node_labels)") == len(PLANTED.nodes)


def test_pod_phases_requests_and_the_pending_pods_without_a_node(live: Live) -> None:
    # 10 workload pods and 8 exporter pods running, 2 pending, ml/done-0 succeeded.
    phases = values(live, "count by (phase) (kube_pod_status_phase == 1)", "phase")
    assert phases == {("Running",): 18, ("Pending",): 2, ("Succeeded",): 1}
    assert scalar(live, "count(kube_pod_status_phase)") == 5 * len(PLANTED.pods)
    pending = 'kube_pod_status_phase{phase="Pending"} == 1'
    assert set(values(live, pending, "pod")) == {("pending-0",), ("pending-cpu",)}
    assert query(live, pending, ago=31 * M) == []  # created 30 minutes ago
    gpu = 'kube_pod_container_resource_requests{resource=~"nvidia_com_.+"}'
    requested = values(live, gpu, "pod", "node", "resource")
    assert len(requested) == 11
    assert requested[("pending-0", "", "nvidia_com_gpu")] == 1  # no node label
    assert requested[("train-0", "hot-1", "nvidia_com_gpu")] == 2
    assert requested[("done-0", "idle-1", "nvidia_com_gpu")] == 1  # finished, still reported
    assert values(live, 'kube_pod_info{pod=~"pending-.*"}', "pod", "node") == {
        ("pending-0", ""): 1,
        ("pending-cpu", ""): 1,
    }
    running = 'kube_pod_status_phase{phase=~"Pending|Running"} == 1'
    on_idle = (
        f'kube_pod_container_resource_requests{{resource=~"nvidia_com_.+", node="idle-1"}} and on (uid) ({running})'
    )
    assert query(live, on_idle) == []


# gpupack ----------------------------------------------------------------------------------------------------------


def test_the_webhook_is_down_for_10_minutes_the_extender_up(live: Live) -> None:
    assert values(live, "up", "job", "pod") == {
        **{(PLANTED.webhook.job, p): 0 for p in PLANTED.webhook.pods},
        **{(PLANTED.extender.job, p): 1 for p in PLANTED.extender.pods},
    }
    assert scalar(live, 'min(up{job="gpupack-webhook"})', ago=10 * M + 1) == 1
    assert scalar(live, 'max(up{job="gpupack-webhook"})', ago=10 * M) == 0


def test_admissions_are_mutated_only_at_a_low_latency(live: Live) -> None:
    rate = "sum by (outcome) (rate(gpupack_webhook_admissions_total[5m]))"
    assert values(live, rate, "outcome") == pytest.approx({("mutated",): 200 / 60})  # 100 a minute per replica
    buckets = "sum by (le) (rate(gpupack_webhook_admission_duration_seconds_bucket[5m]))"
    # Of 100: 2 at or under 0.5 ms, 20 under 1 ms, 70 under 2.5 ms, 95 under 5 ms, 99 under 10 ms, all under 25 ms.
    assert scalar(live, f"histogram_quantile(0.99, {buckets})") == pytest.approx(0.010)
    assert scalar(live, f"histogram_quantile(0.50, {buckets})") == pytest.approx(0.001 + 0.0015 * 30 / 50)
    assert scalar(live, "count(gpupack_webhook_admission_duration_seconds_bucket)") == 2 * 13


def test_extender_verbs_filter_reasons_and_fresh_metrics(live: Live) -> None:
    buckets = "sum by (verb, le) (rate(gpupack_extender_request_duration_seconds_bucket[5m]))"
    # 30 calls a minute: 27 at or under 2.5 ms, 30 under 5 ms; the 29.7th is at 2.5 + 2.5 * 2.7 / 3 ms.
    p99 = values(live, f"histogram_quantile(0.99, {buckets})", "verb")
    assert p99 == pytest.approx({("filter",): 0.00475, ("prioritize",): 0.00475})
    reasons = values(live, "sum by (reason) (increase(gpupack_extender_filtered_nodes_total[10m]))", "reason")
    assert reasons == pytest.approx({(r,): 10 * n for r, n in PLANTED.filtered_per_minute.items()})
    assert scalar(live, "max(gpupack_extender_metrics_stale)") == 0
    assert scalar(live, "max(gpupack_extender_metrics_age_seconds)") == 30


def test_policy_versions_certificate_lease_and_no_failures(live: Live) -> None:
    versions = "count by (version, mode) (gpupack_policy_info)"
    assert values(live, versions, "version", "mode") == {("8e41d0c2a9f7", "enforce"): 4}
    assert values(live, versions, "version", "mode", ago=3 * D) == {("3f2a9c1b7d40", "enforce"): 4}
    expiry = values(live, "gpupack_certificate_expiry_timestamp_seconds", "job")
    assert expiry == {("gpupack-webhook",): live.end + 10 * D, ("gpupack-extender-metrics",): 0}  # extender: no TLS
    assert scalar(live, "sum(increase(gpupack_policy_reload_failures_total[1h]))") == 0
    assert scalar(live, "sum(increase(gpupack_webhook_unrouted_total[1h]))") == 0
    assert scalar(live, "sum(gpupack_webhook_unrouted_total)") == 2  # one pod per replica, before the history
    assert values(live, "gpupack_scheduler_lease_live", "lease", "pod") == {
        (PLANTED.lease, p): 1 for p in PLANTED.webhook.pods
    }


# the recording rules ---------------------------------------------------------------------------------------------


def rules_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return document


def records() -> dict[str, float]:
    """Each record name of the rules file and its smallest group interval (s)."""
    out: dict[str, float] = {}
    for group in rules_document()["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                interval = seconds(group.get("interval", "60s"))
                out[rule["record"]] = min(interval, out.get(rule["record"], interval))
    return out


def test_rule_levels_order_records_after_what_they_read(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {"name": "a", "rules": [{"record": "b:x:avg1h", "expr": "avg_over_time(b:x:avg5m[1h])"}]},
                    {
                        "name": "b",
                        "interval": "30s",
                        "rules": [
                            {"record": "b:x:avg5m", "expr": "avg_over_time(x[5m])"},
                            {"record": "b:x:avg5m", "expr": "avg_over_time(y[5m])"},
                            {"record": "b:x:avg5m_max", "expr": "max(b:x:avg5m)"},  # not b:x:avg5m_max itself
                            {"alert": "A", "expr": "b:x:avg1h > 1"},
                        ],
                    },
                ]
            }
        )
    )
    levels = [[(r.group, r.interval, r.rule["record"]) for r in level] for level in rule_levels([rules])]
    assert levels == [
        [("b", "30s", "b:x:avg5m"), ("b", "30s", "b:x:avg5m")],
        [("a", None, "b:x:avg1h"), ("b", "30s", "b:x:avg5m_max")],
    ]


@pytest.mark.skipif(not RULES.exists(), reason=NO_RULES)
def test_the_dashboards_records_are_defined() -> None:
    assert set(WEEK_LONG + PENDING) <= set(records())


@pytest.mark.skipif(not RULES.exists(), reason=NO_RULES)
@pytest.mark.parametrize("record", WEEK_LONG)
def test_a_record_spans_the_backfilled_week(live: Live, record: str) -> None:
    interval = records()[record]
    counts = values(live, f"count_over_time({record}[7d] offset 1h)")
    # At least one series of it was recorded at every evaluation of the week before the last hour.
    assert max(counts.values()) >= 7 * D / interval * 0.999, counts


@pytest.mark.skipif(not RULES.exists(), reason=NO_RULES)
def test_the_pending_records_hold_the_one_pending_gpu_pod(live: Live) -> None:
    assert scalar(live, "gpupack:gpu_pods_pending:count") == 1
    assert values(live, "gpupack:gpu_pod_pending > 0", "namespace", "pod") == {("ml", "pending-0"): 1}
    assert query(live, "gpupack:gpu_pods_pending:count > 0", ago=H) == []  # created 30 minutes ago


@pytest.mark.skipif(not RULES.exists(), reason=NO_RULES)
def test_every_rule_is_evaluated_live_without_errors(live: Live) -> None:
    groups = get(live.url, "/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    assert {r["name"] for r in rules if r["type"] == "recording"} == set(records())
    # The records are written live too, after the last backfilled sample.
    newest = values(live, "timestamp(gpupack:node_gpu_utilization:avg5m)", "node", ago=live.end - time.time())
    assert newest and min(newest.values()) > live.end
