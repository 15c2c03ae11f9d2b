"""`mig-plan --apply`: the pure decisions, then the whole loop through the real kubernetes client against a fake
API server whose simulated MIG manager pends, succeeds, fails, hangs and forgets to create instances."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupack.core.kube import KubeNodeOps, api_client
from gpupack.migplan.apply import ApplyMetrics, ApplyReport, NodeOps, apply_plan, write_metrics
from gpupack.migplan.apply_steps import (
    ANNOTATION,
    ApplyOptions,
    Observation,
    Relabel,
    decide,
    observe,
    relabel_patch,
    unavailable_limit,
)
from gpupack.migplan.nodes import uses_gpus
from gpupack.testing.net import free_port
from tests.mig_manager_kit import CONFIG, STATE, FakeMigCluster, Mode, gpu_pod, merge, mig_node, write_kubeconfig

ONE_G = "nvidia.com/mig-1g.5gb"
THREE_G = "nvidia.com/mig-3g.20gb"
LAYOUTS = {
    "all-1g.5gb": {ONE_G: 56},
    "all-3g.20gb": {THREE_G: 16},
    "mixed": {ONE_G: 16, THREE_G: 8},
}
OLD = {THREE_G: 16}
"""What the nodes advertise before: the all-3g.20gb layout."""
FAST = ApplyOptions(timeout=0.8, allocatable_timeout=0.8, poll=0.02, max_unavailable=1.0)


def change(node: str = "n1", config: str = "mixed") -> Relabel:
    return Relabel(node, config, LAYOUTS[config])


# pure decisions ---------------------------------------------------------------------------------------------

IDLE = Observation(config="all-3g.20gb", state="success", allocatable=OLD, mig_nodes=4)
MIXED = dict(LAYOUTS["mixed"])


@pytest.mark.parametrize(
    ("phase", "seen", "action", "outcome"),
    [
        ("start", IDLE, "cordon", None),
        ("start", Observation(exists=False), "skip", "vanished"),
        ("start", Observation(config="mixed", state="success", allocatable=MIXED), "skip", "unchanged"),
        # the label already holds the config: the MIG manager reacts only to a change, so no relabel is sent
        ("start", Observation(config="mixed", state="pending", mig_nodes=4), "skip", "skipped-pending"),
        ("start", Observation(config="mixed", state="success", allocatable=OLD, mig_nodes=4), "fail", "no-instances"),
        ("start", Observation(config="mixed", state="failed", mig_nodes=4), "fail", "failed"),
        ("start", Observation(config="mixed", state=None, mig_nodes=4), "fail", "failed"),
        ("start", Observation(config="mixed", state="pending", unschedulable=True, cordoned_by_us=True), "await", None),
        (
            "start",
            Observation(config="mixed", state="success", allocatable=OLD, unschedulable=True, cordoned_by_us=True),
            "configured",
            None,
        ),
        ("start", Observation(unschedulable=True, mig_nodes=4), "skip", "skipped-cordoned"),
        ("start", Observation(gpu_pods=("ml/train",), mig_nodes=4), "skip", "skipped-busy"),
        ("start", Observation(unavailable=1, mig_nodes=4), "skip", "skipped-limit"),
        ("start", Observation(unavailable=1, mig_nodes=8), "cordon", None),
        ("start", Observation(unavailable=2, mig_nodes=8), "skip", "skipped-limit"),
        # gpupack cordoned it in an earlier run: retried without a second cordon, and the limit is not asked
        ("start", Observation(unschedulable=True, cordoned_by_us=True, unavailable=4, mig_nodes=4), "relabel", None),
        (
            "start",
            Observation(config="mixed", state="success", allocatable=MIXED, unschedulable=True, cordoned_by_us=True),
            "finish",
            "applied",
        ),
        ("cordoned", Observation(), "relabel", None),
        ("cordoned", Observation(gpu_pods=("ml/late",)), "release", "skipped-busy"),
        ("cordoned", Observation(exists=False), "fail", "vanished"),
        ("relabelled", Observation(config="mixed", state=None, elapsed=0.1), "wait", None),
        ("relabelled", Observation(config="mixed", state="pending", elapsed=0.1), "wait", None),
        ("relabelled", Observation(config="mixed", state="pending", elapsed=0.8), "fail", "timeout"),
        ("relabelled", Observation(config="mixed", state=None, elapsed=0.8), "fail", "timeout"),
        ("relabelled", Observation(config="mixed", state="success"), "configured", None),
        ("relabelled", Observation(config="mixed", state="failed"), "fail", "failed"),
        ("relabelled", Observation(config="all-1g.5gb", state="pending"), "fail", "failed"),
        ("relabelled", Observation(exists=False), "fail", "vanished"),
        ("configured", Observation(config="mixed", state="success", allocatable=OLD, elapsed=0.1), "wait", None),
        (
            "configured",
            Observation(config="mixed", state="success", allocatable=OLD, elapsed=0.8),
            "fail",
            "no-instances",
        ),
        (
            "configured",
            Observation(config="mixed", state="success", allocatable={}, elapsed=0.8),
            "fail",
            "no-instances",
        ),
        ("configured", Observation(config="mixed", state="success", allocatable=MIXED), "finish", "applied"),
        # more than planned (or a leftover profile of the old layout) is not a failure: at least the plan's counts
        (
            "configured",
            Observation(config="mixed", state="success", allocatable={**MIXED, ONE_G: 20}),
            "finish",
            "applied",
        ),
        ("configured", Observation(config="mixed", state="failed", allocatable=MIXED), "fail", "failed"),
    ],
)
def test_decide(phase: Any, seen: Observation, action: str, outcome: str | None) -> None:
    step = decide(change(), phase, seen, ApplyOptions(timeout=0.8, allocatable_timeout=0.8, poll=0.02))
    assert (step.action, step.outcome) == (action, outcome), step.message


@pytest.mark.parametrize(
    ("fraction", "mig_nodes", "limit"), [(0.25, 4, 1), (0.25, 3, 1), (0.25, 8, 2), (0.0, 10, 1), (1.0, 5, 5)]
)
def test_unavailable_limit_is_a_floor_but_at_least_one(fraction: float, mig_nodes: int, limit: int) -> None:
    assert unavailable_limit(fraction, mig_nodes) == limit


@pytest.mark.parametrize(
    ("pod", "busy"),
    [
        (gpu_pod("a", "n1"), True),
        (gpu_pod("a", "n1", resource="nvidia.com/gpu"), True),
        (gpu_pod("a", "n1", init=True), True),
        (gpu_pod("a", "n1", phase="Pending"), True),
        (gpu_pod("a", "n1", phase="Succeeded"), False),
        (gpu_pod("a", "n1", phase="Failed"), False),
        (gpu_pod("a", "n1", resource=None), False),
        (gpu_pod("a", "n1", resource="example.com/fpga"), False),
    ],
)
def test_a_pod_holds_the_gpus_while_it_may_run_and_asks_for_an_nvidia_resource(pod: dict[str, Any], busy: bool) -> None:
    assert uses_gpus(pod) is busy


def test_observe_reads_labels_annotation_cordon_and_counts() -> None:
    node = mig_node("n1", "mixed", "pending", {ONE_G: 16}, unschedulable=True, annotations={ANNOTATION: "mixed"})
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1k"
    seen = observe(node, [gpu_pod("a", "n1"), gpu_pod("b", "n1", resource=None)], 3.0)
    assert seen == Observation(
        config="mixed",
        state="pending",
        unschedulable=True,
        cordoned_by_us=True,
        allocatable={ONE_G: 16, "nvidia.com/gpu": 1000},
        gpu_pods=("ml/a",),
        elapsed=3.0,
    )


def test_relabel_patch_removes_the_state_label_in_the_same_write() -> None:
    assert relabel_patch("mixed") == {"metadata": {"labels": {CONFIG: "mixed", STATE: None}}}


class MemoryNodes:
    """An in-memory NodeOps that records patches and events, with no MIG manager (no server)."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []

    def get_node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes.values())

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return []

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((name, patch))
        self.nodes[name] = merge(self.nodes[name], patch)
        return self.nodes[name]

    def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def test_a_timeout_is_measured_with_the_clock_given() -> None:
    """The state never changes in memory: with a fake clock, the timeout ends the wait after timeout/poll sleeps."""
    nodes = MemoryNodes(mig_node("n1", "all-3g.20gb", "success", OLD))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    ops: NodeOps = nodes
    report = apply_plan(ops, [change()], ApplyOptions(timeout=900.0, poll=5.0), clock=lambda: now[0], sleep=sleep)
    assert [r.outcome for r in report.results] == ["timeout"]
    assert 900.0 <= now[0] <= 905.0
    assert [p for _, p in nodes.patches] == [
        {"spec": {"unschedulable": True}, "metadata": {"annotations": {ANNOTATION: "mixed"}}},
        relabel_patch("mixed"),
    ]
    assert [e["type"] for e in nodes.events] == ["Warning"]


# through the HTTP fake ---------------------------------------------------------------------------------------


@dataclass
class Cluster:
    fake: FakeMigCluster
    ops: KubeNodeOps
    metrics: ApplyMetrics

    def add(self, *names: str, mode: Mode = "ok", **kwargs: Any) -> None:
        for name in names:
            self.fake.add(mig_node(name, kwargs.pop("config", "all-3g.20gb"), allocatable=OLD, **kwargs))
            self.fake.modes[name] = mode

    async def apply(self, changes: Sequence[Relabel], options: ApplyOptions = FAST) -> ApplyReport:
        return await asyncio.to_thread(apply_plan, self.ops, changes, options, metrics=self.metrics)

    def node(self, name: str) -> dict[str, Any]:
        return self.fake.nodes[name]

    def failures(self, reason: str) -> float | None:
        return self.metrics.registry.get_sample_value("gpupack_mig_apply_failures_total", {"reason": reason})


@pytest.fixture
async def cluster(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Cluster]:
    fake = FakeMigCluster(layouts=LAYOUTS)
    server = await aiohttp_server(fake.app())
    ops = KubeNodeOps(api_client(write_kubeconfig(tmp_path / "kubeconfig", server.port)), request_timeout=5.0)
    yield Cluster(fake, ops, ApplyMetrics())


def cordoned(node: dict[str, Any]) -> bool:
    return node["spec"].get("unschedulable") is True


async def test_relabel_sets_the_config_and_clears_the_state_in_one_merge_patch(cluster: Cluster) -> None:
    cluster.add("n1")
    await cluster.apply([change()])
    relabels = [c for c in cluster.fake.calls if c.method == "PATCH" and CONFIG in str(c.body)]
    assert len(relabels) == 1
    assert relabels[0].content_type == "application/merge-patch+json"
    assert relabels[0].body == {"metadata": {"labels": {CONFIG: "mixed", STATE: None}}}


async def test_a_node_is_cordoned_relabelled_reconfigured_and_uncordoned(cluster: Cluster) -> None:
    cluster.add("n1")
    report = await cluster.apply([change()])
    assert report.ok
    assert [(r.node, r.outcome) for r in report.results] == [("n1", "applied")]
    assert cluster.fake.node_calls() == [("n1", "cordon"), ("n1", "relabel"), ("n1", "uncordon")]
    node = cluster.node("n1")
    assert not cordoned(node)
    assert ANNOTATION not in node["metadata"]["annotations"]
    assert node["metadata"]["labels"][CONFIG] == "mixed"
    assert node["metadata"]["labels"][STATE] == "success"
    assert [(e["type"], e["reason"], e["involvedObject"]["uid"]) for e in cluster.fake.events] == [
        ("Normal", "MigReconfigured", node["metadata"]["uid"])
    ]
    assert cluster.metrics.registry.get_sample_value("gpupack_mig_apply_applied_nodes_total") == 1.0


async def test_the_wait_follows_absent_then_pending_then_success(cluster: Cluster) -> None:
    cluster.add("n1")
    cluster.fake.notice_delay, cluster.fake.apply_delay = 0.1, 0.2
    await cluster.apply([change()])
    relabel = next(i for i, c in enumerate(cluster.fake.calls) if c.method == "PATCH" and CONFIG in str(c.body))
    seen = [c.state for c in cluster.fake.calls[relabel:] if c.method == "GET" and c.node == "n1"]
    assert seen[0] is None  # the stale success was removed with the relabel
    deduplicated = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert deduplicated == [None, "pending", "success"]


async def test_the_old_layouts_success_is_not_taken_for_the_new_one(cluster: Cluster) -> None:
    """Same counts before and after (a renamed config): only the state can tell, and the MIG manager fails late.
    Reading the old `success` would uncordon a node whose reconfiguration then fails."""
    cluster.fake.add(mig_node("n1", "all-3g.20gb", "success", {THREE_G: 16}))
    cluster.fake.modes["n1"] = "failed"
    cluster.fake.notice_delay = 0.2
    report = await cluster.apply([Relabel("n1", "all-3g.20gb-renamed", {THREE_G: 16})])
    assert [r.outcome for r in report.results] == ["failed"]
    assert cordoned(cluster.node("n1"))


@pytest.mark.parametrize(
    ("mode", "outcome", "text"),
    [
        ("stuck-pending", "timeout", f"{STATE} still pending after"),
        ("failed", "failed", f"{STATE}=failed"),
        ("success-no-instances", "no-instances", "nvidia.com/mig-1g.5gb=0 (want 16)"),
    ],
)
async def test_a_failed_reconfiguration_leaves_the_node_cordoned_with_an_event_a_metric_and_a_log_line(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, mode: Mode, outcome: str, text: str
) -> None:
    cluster.add("n1", mode=mode)
    with caplog.at_level(logging.WARNING, logger="gpupack.migplan"):
        report = await cluster.apply([change()])
    assert not report.ok
    (result,) = report.results
    assert (result.outcome, result.node) == (outcome, "n1")
    assert text in result.message and "left cordoned" in result.message
    node = cluster.node("n1")
    assert cordoned(node)
    assert node["metadata"]["annotations"][ANNOTATION] == "mixed"
    assert cluster.fake.node_calls() == [("n1", "cordon"), ("n1", "relabel")]
    (event,) = cluster.fake.events
    assert event["type"] == "Warning" and event["reason"] == "MigReconfigureFailed"
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": node["metadata"]["uid"]}
    assert "nvidia.com/mig.config=mixed" in event["message"] and text in event["message"]
    assert cluster.failures(outcome) == 1.0
    (record,) = [r for r in caplog.records if r.name == "gpupack.migplan" and r.levelno == logging.WARNING]
    assert "node=n1" in record.getMessage() and f"outcome={outcome}" in record.getMessage()


async def test_instances_advertised_late_but_within_the_allocatable_timeout_are_applied(cluster: Cluster) -> None:
    cluster.add("n1", mode="slow-allocatable")
    cluster.fake.allocatable_delay = 0.3
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["applied"]
    assert cluster.node("n1")["status"]["allocatable"][ONE_G] == "16"


async def test_instances_later_than_the_allocatable_timeout_are_no_instances(cluster: Cluster) -> None:
    cluster.add("n1", mode="slow-allocatable")
    cluster.fake.allocatable_delay = 0.5
    report = await cluster.apply(
        [change()], ApplyOptions(timeout=1.0, allocatable_timeout=0.2, poll=0.02, max_unavailable=1)
    )
    assert [r.outcome for r in report.results] == ["no-instances"]


@pytest.mark.parametrize("init", [False, True])
async def test_a_node_with_a_gpu_pod_is_skipped_and_never_patched(cluster: Cluster, init: bool) -> None:
    cluster.add("n1", "n2")
    cluster.fake.pods += [gpu_pod("train", "n1", init=init), gpu_pod("done", "n2", phase="Succeeded")]
    report = await cluster.apply([change("n1"), change("n2")])
    assert [r.outcome for r in report.results] == ["skipped-busy", "applied"]
    assert "ml/train" in report.results[0].message
    assert report.ok
    assert all(node != "n1" for node, _ in cluster.fake.node_calls())
    pod_lists = [c.query for c in cluster.fake.calls if c.path == "/api/v1/pods"]
    assert {"fieldSelector": "spec.nodeName=n1"}.items() <= pod_lists[0].items()


async def test_a_pod_bound_while_cordoning_makes_it_uncordon_and_skip(cluster: Cluster) -> None:
    cluster.add("n1")

    def bind(node: str, patch: dict[str, Any]) -> None:
        if (patch.get("spec") or {}).get("unschedulable") is True:
            cluster.fake.pods.append(gpu_pod("raced", node))

    cluster.fake.on_patch.append(bind)
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["skipped-busy"]
    assert cluster.fake.node_calls() == [("n1", "cordon"), ("n1", "uncordon")]
    node = cluster.node("n1")
    assert not cordoned(node) and ANNOTATION not in node["metadata"]["annotations"]
    assert node["metadata"]["labels"][CONFIG] == "all-3g.20gb"


async def test_a_node_an_admin_cordoned_is_left_alone(cluster: Cluster) -> None:
    cluster.add("n1", unschedulable=True)
    cluster.add("n2", "n3", "n4")
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["skipped-cordoned"]
    assert cluster.fake.node_calls() == []
    assert cordoned(cluster.node("n1"))


async def test_the_unavailable_limit_counts_nodes_already_cordoned(cluster: Cluster) -> None:
    """4 MIG nodes at 25 %: one may be unschedulable, and an admin's cordon already takes that place."""
    cluster.add("n1", "n2", "n3")
    cluster.add("n4", unschedulable=True)
    cluster.fake.add(mig_node("cpu", config=None, state=None, capable=False, unschedulable=True))  # not a MIG node
    report = await cluster.apply([change("n1"), change("n2")], ApplyOptions(timeout=0.8, poll=0.02))
    assert [r.outcome for r in report.results] == ["skipped-limit", "skipped-limit"]
    assert "1 of 4 MIG nodes unschedulable, limit 1" in report.results[0].message
    assert cluster.fake.node_calls() == []
    assert report.ok


async def test_a_failed_node_stays_cordoned_and_counts_against_the_limit(cluster: Cluster) -> None:
    """8 MIG nodes at 25 %: 2 at once. An admin holds one; n1 fails and keeps the other; n2 must wait."""
    cluster.add("n1", mode="failed")
    cluster.add("n2", "n3", "n4", "n5", "n6", "n7")
    cluster.add("n8", unschedulable=True)
    options = ApplyOptions(timeout=0.8, allocatable_timeout=0.8, poll=0.02, keep_going=True)
    report = await cluster.apply([change("n1"), change("n2"), change("n3")], options)
    assert [r.outcome for r in report.results] == ["failed", "skipped-limit", "skipped-limit"]
    assert cluster.fake.node_calls() == [("n1", "cordon"), ("n1", "relabel")]


async def test_with_keep_going_the_next_node_is_tried_after_a_failure_within_the_limit(cluster: Cluster) -> None:
    cluster.add("n1", mode="failed")
    cluster.add("n2")
    options = ApplyOptions(timeout=0.8, allocatable_timeout=0.8, poll=0.02, max_unavailable=1.0, keep_going=True)
    report = await cluster.apply([change("n1"), change("n2")], options)
    assert [r.outcome for r in report.results] == ["failed", "applied"]


async def test_by_default_the_run_stops_at_the_first_failure(cluster: Cluster) -> None:
    cluster.add("n1", mode="failed")
    cluster.add("n2")
    report = await cluster.apply([change("n1"), change("n2")])
    assert [r.outcome for r in report.results] == ["failed", "skipped-stopped"]
    assert all(node == "n1" for node, _ in cluster.fake.node_calls())
    assert cluster.node("n2")["metadata"]["labels"][CONFIG] == "all-3g.20gb"


async def test_nodes_are_reconfigured_one_at_a_time_in_the_given_order(cluster: Cluster) -> None:
    cluster.add("n1", "n2", "n3")
    report = await cluster.apply([change("n3"), change("n1", "all-1g.5gb"), change("n2")])
    assert [r.outcome for r in report.results] == ["applied"] * 3
    steps = ["cordon", "relabel", "uncordon"]
    assert cluster.fake.node_calls() == [(n, s) for n in ("n3", "n1", "n2") for s in steps]


async def test_a_node_already_on_its_config_is_unchanged_and_not_patched(cluster: Cluster) -> None:
    cluster.fake.add(mig_node("n1", "mixed", "success", LAYOUTS["mixed"]))
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["unchanged"]
    assert not [c for c in cluster.fake.calls if c.method != "GET"]


@pytest.mark.parametrize(("mode", "status"), [("patch-403", "HTTP 403"), ("patch-500", "HTTP 500")])
async def test_an_api_error_is_an_outcome_naming_the_node_and_the_status(
    cluster: Cluster, mode: Mode, status: str
) -> None:
    cluster.add("n1", mode=mode)
    report = await cluster.apply([change()])
    (result,) = report.results
    assert result.outcome == "api-error" and not report.ok
    assert "node n1" in result.message and status in result.message and "not cordoned" in result.message
    if mode == "patch-403":
        assert 'cannot patch resource "nodes"' in result.message
    assert cluster.failures("api-error") == 1.0


async def test_a_conflict_on_a_patch_is_retried(cluster: Cluster) -> None:
    cluster.add("n1", mode="conflict-once")
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["applied"]
    assert sum(c.method == "PATCH" for c in cluster.fake.calls) == 4  # 409, cordon, relabel, uncordon


@pytest.mark.parametrize(("failing_reads", "outcome"), [(3, "applied"), (-1, "api-error")])
async def test_reads_failing_while_waiting_are_retried_until_the_timeout(
    cluster: Cluster, failing_reads: int, outcome: str
) -> None:
    cluster.add("n1")

    def flaky(node: str, patch: dict[str, Any]) -> None:
        if CONFIG in str(patch):
            cluster.fake.fail_gets[node] = failing_reads

    cluster.fake.on_patch.append(flaky)
    report = await cluster.apply([change()], ApplyOptions(timeout=0.5, allocatable_timeout=0.5, poll=0.02))
    (result,) = report.results
    assert result.outcome == outcome, result.message
    if outcome == "api-error":
        assert "HTTP 500" in result.message and "left cordoned" in result.message
        assert cordoned(cluster.node("n1"))


@pytest.mark.parametrize(
    "options",
    [{"poll": 0.0}, {"timeout": -1.0}, {"max_unavailable": 1.5}, {"max_unavailable": -0.1}],
)
def test_options_out_of_range_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ApplyOptions(**options)  # type: ignore[arg-type]


async def test_a_node_deleted_while_reconfiguring_is_vanished(cluster: Cluster) -> None:
    cluster.add("n1", mode="vanishes")
    report = await cluster.apply([change()])
    (result,) = report.results
    assert result.outcome == "vanished" and "n1" in result.message and "the node is gone" in result.message
    assert cluster.failures("vanished") == 1.0
    assert cluster.fake.events == []  # nothing left to describe


async def test_a_node_missing_from_the_start_is_vanished_and_untouched(cluster: Cluster) -> None:
    report = await cluster.apply([change("gone")])
    assert [r.outcome for r in report.results] == ["vanished"]
    assert not [c for c in cluster.fake.calls if c.method != "GET"]


async def test_no_api_server_is_an_outcome_not_a_traceback(tmp_path: Path) -> None:
    ops = KubeNodeOps(api_client(write_kubeconfig(tmp_path / "kubeconfig", free_port())), request_timeout=2.0)
    report = await asyncio.to_thread(apply_plan, ops, [change()], FAST)
    (result,) = report.results
    assert result.outcome == "api-error"
    assert "node n1" in result.message and "no answer" in result.message


async def test_the_metrics_are_written_in_the_textfile_format(cluster: Cluster, tmp_path: Path) -> None:
    cluster.add("n1")
    cluster.add("n2", mode="stuck-pending")
    await cluster.apply([change("n1"), change("n2")])
    path = tmp_path / "gpupack_mig_apply.prom"
    write_metrics(cluster.metrics, path)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }
    assert samples[("gpupack_mig_apply_failures_total", (("reason", "timeout"),))] == 1.0
    assert samples[("gpupack_mig_apply_applied_nodes_total", ())] == 1.0
    assert samples[("gpupack_mig_apply_last_run_timestamp_seconds", ())] > 0


async def test_a_node_already_labelled_but_failed_is_reported_not_relabelled_in_vain(cluster: Cluster) -> None:
    """Setting the same label value again would wait for a MIG manager that never reacts, and time out."""
    cluster.add("n1", config="mixed", state="failed", unschedulable=True, annotations={ANNOTATION: "mixed"})
    report = await cluster.apply([change()])
    (result,) = report.results
    assert result.outcome == "failed" and "restart the nvidia-mig-manager pod on n1" in result.message
    assert not [c for c in cluster.fake.calls if c.method == "PATCH"]
    assert cordoned(cluster.node("n1"))


async def test_a_node_gpupack_left_cordoned_while_the_mig_manager_was_still_at_work_is_awaited(
    cluster: Cluster,
) -> None:
    cluster.add("n1", config="mixed", state="pending", unschedulable=True, annotations={ANNOTATION: "mixed"})
    cluster.fake._reconfigure("n1", "mixed")  # the MIG manager finishes what it started: success, then instances
    report = await cluster.apply([change()])
    assert [(r.node, r.outcome) for r in report.results] == [("n1", "applied")]
    assert cluster.fake.node_calls() == [("n1", "uncordon")]  # no relabel
    assert not cordoned(cluster.node("n1"))
