"""`mig-plan --apply`: the pure decisions, the clock, and the few faults of the API server a real one cannot be made
to produce on demand (a 500, a 409), through the real kubernetes client against the HTTP-level fake. The loop's
behaviour against Kubernetes itself (RBAC, patches, Events, 404s) and a MIG manager that pends, fails, hangs and
forgets to create instances is tested on the real control plane: tests/test_migplan_real.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupack.core.kube import KubeNodeOps, api_client
from gpupack.migplan.apply import ApplyMetrics, ApplyReport, NodeOps, apply_plan
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


@pytest.mark.parametrize(
    "options",
    [{"poll": 0.0}, {"timeout": -1.0}, {"max_unavailable": 1.5}, {"max_unavailable": -0.1}],
)
def test_options_out_of_range_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ApplyOptions(**options)  # type: ignore[arg-type]


async def test_no_api_server_is_an_outcome_not_a_traceback(tmp_path: Path) -> None:
    ops = KubeNodeOps(api_client(write_kubeconfig(tmp_path / "kubeconfig", free_port())), request_timeout=2.0)
    report = await asyncio.to_thread(apply_plan, ops, [change()], FAST)
    (result,) = report.results
    assert result.outcome == "api-error"
    assert "node n1" in result.message and "no answer" in result.message


# through the HTTP fake: only the faults a real API server cannot be made to answer on demand -------------------
# (everything else --apply does runs on the real control plane: tests/test_migplan_real.py)


@dataclass
class Cluster:
    fake: FakeMigCluster
    ops: KubeNodeOps
    metrics: ApplyMetrics

    def add(self, *names: str, mode: Mode = "ok") -> None:
        for name in names:
            self.fake.add(mig_node(name, "all-3g.20gb", allocatable=OLD))
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


# Fake: a real API server answers a PATCH with 500 only when etcd fails, which a test cannot cause mid-apply.
async def test_a_server_error_on_a_patch_is_an_api_error_naming_the_node_and_the_status(cluster: Cluster) -> None:
    cluster.add("n1", mode="patch-500")
    report = await cluster.apply([change()])
    (result,) = report.results
    assert result.outcome == "api-error" and not report.ok
    assert "node n1" in result.message and "HTTP 500" in result.message and "not cordoned" in result.message
    assert cluster.failures("api-error") == 1.0


# Fake: a real API server retries a merge patch without resourceVersion on a conflict itself, never answering 409.
async def test_a_conflict_on_a_patch_is_retried(cluster: Cluster) -> None:
    cluster.add("n1", mode="conflict-once")
    report = await cluster.apply([change()])
    assert [r.outcome for r in report.results] == ["applied"]
    assert sum(c.method == "PATCH" for c in cluster.fake.calls) == 4  # 409, cordon, relabel, uncordon


# Fake: GETs answering 500 for a while (an etcd leader change) cannot be produced by a real API server on demand.
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
