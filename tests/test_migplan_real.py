"""`mig-plan --apply` on a real kube-apiserver, as the mig-plan ServiceAccount with exactly the RBAC of
manifests/mig-plan/, against a stand-in MIG manager and device plugin working through the same API server.

First the loop (`apply_plan` through the real kubernetes client), then the command (`gpupack mig-plan --kubeconfig
K --apply`, a subprocess). What the tests read back is what the API server holds and what its audit log says it
was asked and answered: the cordon, relabel and uncordon patches, the reads while waiting, the Events, the 404 of a
vanished node, the 403 of a missing rule. Any request RBAC refuses fails the test that made it, unless refusing is
that test's subject.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpupack.core.admitted import admitted_pod
from gpupack.core.kube import KubeNodeOps, api_client
from gpupack.migplan.apply import ApplyMetrics, ApplyReport, apply_plan, write_metrics
from gpupack.migplan.apply_steps import ANNOTATION, ApplyOptions, Relabel
from gpupack.testing.control_plane import env_without_proxy, forbidden_lines
from tests.audit_log import refusals, service_account_user, subject_can, verbs
from tests.mig_manager_real import (
    CONFIG,
    LAYOUTS_CONFIG_MAP,
    NAMESPACE,
    STATE,
    USER,
    MigCluster,
    gpu_pod,
    granted,
    start,
)

pytestmark = pytest.mark.timeout(600)

ONE_G = "nvidia.com/mig-1g.5gb"
THREE_G = "nvidia.com/mig-3g.20gb"
LAYOUTS = {
    "all-1g.5gb": {ONE_G: 56},
    "all-3g.20gb": {THREE_G: 16},
    "mixed": {ONE_G: 16, THREE_G: 8},
}
OLD = {THREE_G: 16}
"""What the nodes advertise before: the all-3g.20gb layout."""
PATIENT = ApplyOptions(timeout=30.0, allocatable_timeout=30.0, poll=0.05, max_unavailable=1.0)
"""For the runs that end well: a loaded machine's watch and writes never make them time out."""


def change(node: str = "n1", config: str = "mixed") -> Relabel:
    return Relabel(node, config, LAYOUTS[config])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigCluster]:
    yield from start(tmp_path_factory.mktemp("migplan-real"))


@pytest.fixture
def cluster(real: MigCluster) -> Iterator[MigCluster]:
    """The shared control plane, emptied; afterwards, no request of the mig-plan ServiceAccount was refused."""
    real.clean()
    real.manager.layouts.update(LAYOUTS)
    yield real
    assert refusals(real.requests()) == []


def apply(
    cluster: MigCluster, changes: Sequence[Relabel], options: ApplyOptions = PATIENT, kubeconfig: Path | None = None
) -> tuple[ApplyReport, ApplyMetrics]:
    """`apply_plan` through the real client, with the mig-plan ServiceAccount's token (or `kubeconfig`'s)."""
    api = api_client(kubeconfig or cluster.kubeconfig)
    try:
        metrics = ApplyMetrics()
        return apply_plan(KubeNodeOps(api, request_timeout=10.0), changes, options, metrics=metrics), metrics
    finally:
        api.close()


def node(cluster: MigCluster, name: str) -> dict[str, Any]:
    found = cluster.node(name)
    assert found is not None, f"node {name} is gone"
    return found


def cordoned(found: dict[str, Any]) -> bool:
    return found["spec"].get("unschedulable") is True


def failures(metrics: ApplyMetrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("gpupack_mig_apply_failures_total", {"reason": reason})


def writes(cluster: MigCluster) -> list[str]:
    """The verbs of the mig-plan ServiceAccount's requests that were not reads."""
    return [f"{r.verb} {r.resource}/{r.name}" for r in cluster.requests() if r.verb not in ("get", "list")]


# the loop --------------------------------------------------------------------------------------------------------


class ContentTypes:
    """The client's connection pool, noting the Content-Type of each PATCH it sends to the API server (the audit
    log does not keep request headers)."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.patches = pool, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        if method == "PATCH":
            self.patches.append((kwargs.get("headers") or {}).get("Content-Type"))
        return self.pool.request(method, url, **kwargs)


def test_relabel_sets_the_config_and_clears_the_state_in_one_merge_patch(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD)
    api = api_client(cluster.kubeconfig)
    sent = api.rest_client.pool_manager = ContentTypes(api.rest_client.pool_manager)
    try:
        apply_plan(KubeNodeOps(api, request_timeout=10.0), [change()], PATIENT)
    finally:
        api.close()
    # JSON merge patch (RFC 7386): `null` removes a label; the client would send a dict as a strategic merge
    assert sent.patches == ["application/merge-patch+json"] * 3
    relabels = [r for r in cluster.requests() if r.verb == "patch" and CONFIG in json.dumps(r.body)]
    assert len(relabels) == 1
    assert relabels[0].body == {"metadata": {"labels": {CONFIG: "mixed", STATE: None}}}
    # the API server's answer to that one write: the new config, and the old layout's state gone with it
    labels = relabels[0].answer["metadata"]["labels"]
    assert labels[CONFIG] == "mixed" and STATE not in labels


def test_a_node_is_cordoned_relabelled_reconfigured_and_uncordoned(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD)
    report, metrics = apply(cluster, [change()])
    assert report.ok
    assert [(r.node, r.outcome) for r in report.results] == [("n1", "applied")]
    assert cluster.node_writes() == [("n1", "cordon"), ("n1", "relabel"), ("n1", "uncordon")]
    found = node(cluster, "n1")
    assert not cordoned(found)
    assert ANNOTATION not in (found["metadata"].get("annotations") or {})
    assert found["metadata"]["labels"][CONFIG] == "mixed"
    assert found["metadata"]["labels"][STATE] == "success"
    assert {k: v for k, v in found["status"]["allocatable"].items() if k.startswith("nvidia.com/mig-")} == {
        ONE_G: "16",
        THREE_G: "8",
    }
    assert [(e["type"], e["reason"], e["involvedObject"]["uid"]) for e in cluster.events()] == [
        ("Normal", "MigReconfigured", found["metadata"]["uid"])
    ]
    assert metrics.registry.get_sample_value("gpupack_mig_apply_applied_nodes_total") == 1.0


def test_the_wait_follows_absent_then_pending_then_success(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD)
    cluster.manager.notice_delay, cluster.manager.apply_delay = 0.5, 0.5
    apply(cluster, [change()])
    requests = cluster.requests()
    relabel = next(i for i, r in enumerate(requests) if r.verb == "patch" and CONFIG in json.dumps(r.body))
    seen = [
        r.answer["metadata"]["labels"].get(STATE)
        for r in requests[relabel:]
        if r.verb == "get" and r.resource == "nodes" and r.name == "n1"
    ]
    assert seen[0] is None  # the stale success was removed with the relabel
    deduplicated = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert deduplicated == [None, "pending", "success"]


def test_the_old_layouts_success_is_not_taken_for_the_new_one(cluster: MigCluster) -> None:
    """Same counts before and after (a renamed config): only the state can tell, and the MIG manager fails late.
    Reading the old `success` would uncordon a node whose reconfiguration then fails."""
    cluster.add("n1", "all-3g.20gb", "success", {THREE_G: 16}, mode="failed")
    cluster.manager.notice_delay = 0.2
    report, _ = apply(cluster, [Relabel("n1", "all-3g.20gb-renamed", {THREE_G: 16})])
    assert [r.outcome for r in report.results] == ["failed"]
    assert cordoned(node(cluster, "n1"))


@pytest.mark.parametrize(
    ("mode", "outcome", "text", "options"),
    [
        ("stuck-pending", "timeout", f"{STATE} still pending after", ApplyOptions(timeout=1.5, poll=0.05)),
        ("failed", "failed", f"{STATE}=failed", PATIENT),
        (
            "success-no-instances",
            "no-instances",
            "nvidia.com/mig-1g.5gb=0 (want 16)",
            ApplyOptions(timeout=30.0, allocatable_timeout=1.0, poll=0.05),
        ),
    ],
)
def test_a_failed_reconfiguration_leaves_the_node_cordoned_with_an_event_a_metric_and_a_log_line(
    cluster: MigCluster, caplog: pytest.LogCaptureFixture, mode: Any, outcome: str, text: str, options: ApplyOptions
) -> None:
    cluster.add("n1", allocatable=OLD, mode=mode)
    with caplog.at_level(logging.WARNING, logger="gpupack.migplan"):
        report, metrics = apply(cluster, [change()], options)
    assert not report.ok
    (result,) = report.results
    assert (result.outcome, result.node) == (outcome, "n1")
    assert text in result.message and "left cordoned" in result.message
    found = node(cluster, "n1")
    assert cordoned(found)
    assert found["metadata"]["annotations"][ANNOTATION] == "mixed"
    assert cluster.node_writes() == [("n1", "cordon"), ("n1", "relabel")]
    (event,) = cluster.events("n1")  # as `kubectl describe node n1` shows it
    assert event["type"] == "Warning" and event["reason"] == "MigReconfigureFailed"
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": found["metadata"]["uid"],
    }
    assert "nvidia.com/mig.config=mixed" in event["message"] and text in event["message"]
    assert failures(metrics, outcome) == 1.0
    (record,) = [r for r in caplog.records if r.name == "gpupack.migplan" and r.levelno == logging.WARNING]
    assert "node=n1" in record.getMessage() and f"outcome={outcome}" in record.getMessage()


def test_instances_advertised_late_but_within_the_allocatable_timeout_are_applied(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, mode="slow-allocatable")
    cluster.manager.allocatable_delay = 0.5
    report, _ = apply(cluster, [change()])
    assert [r.outcome for r in report.results] == ["applied"]
    assert node(cluster, "n1")["status"]["allocatable"][ONE_G] == "16"


def test_instances_later_than_the_allocatable_timeout_are_no_instances(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, mode="slow-allocatable")
    cluster.manager.allocatable_delay = 5.0
    report, _ = apply(cluster, [change()], ApplyOptions(timeout=30.0, allocatable_timeout=0.5, poll=0.05))
    assert [r.outcome for r in report.results] == ["no-instances"]


@pytest.mark.parametrize("init", [False, True])
def test_a_node_with_a_gpu_pod_is_skipped_and_never_patched(cluster: MigCluster, init: bool) -> None:
    cluster.add("n1", allocatable=OLD)
    cluster.add("n2", allocatable=OLD)
    cluster.pod(gpu_pod("train", "n1", init=init), "Running")
    cluster.pod(gpu_pod("done", "n2"), "Succeeded")
    report, _ = apply(cluster, [change("n1"), change("n2")])
    assert [r.outcome for r in report.results] == ["skipped-busy", "applied"]
    assert "ml/train" in report.results[0].message
    assert report.ok
    assert all(name != "n1" for name, _ in cluster.node_writes())
    pod_lists = [r.query for r in cluster.requests() if r.verb == "list" and r.resource == "pods"]
    assert pod_lists[0]["fieldSelector"] == "spec.nodeName=n1"


class BindOnCordon:
    """The real node calls, and a GPU pod bound to the node (through the API) the moment its cordon is written:
    the pod that wins the race between the first check and the cordon."""

    def __init__(self, ops: KubeNodeOps, cluster: MigCluster) -> None:
        self.ops, self.cluster = ops, cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ops, name)

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        found = self.ops.patch_node(name, patch)
        if (patch.get("spec") or {}).get("unschedulable") is True:
            self.cluster.pod(gpu_pod("raced", name), "Running")
        return found


def test_a_pod_bound_while_cordoning_makes_it_uncordon_and_skip(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD)
    api = api_client(cluster.kubeconfig)
    try:
        ops: Any = BindOnCordon(KubeNodeOps(api, request_timeout=10.0), cluster)
        report = apply_plan(ops, [change()], PATIENT)
    finally:
        api.close()
    assert [r.outcome for r in report.results] == ["skipped-busy"]
    assert cluster.node_writes() == [("n1", "cordon"), ("n1", "uncordon")]
    found = node(cluster, "n1")
    assert not cordoned(found) and ANNOTATION not in (found["metadata"].get("annotations") or {})
    assert found["metadata"]["labels"][CONFIG] == "all-3g.20gb"


def test_a_node_an_admin_cordoned_is_left_alone(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, unschedulable=True)
    for name in ("n2", "n3", "n4"):
        cluster.add(name, allocatable=OLD)
    report, _ = apply(cluster, [change()])
    assert [r.outcome for r in report.results] == ["skipped-cordoned"]
    assert cluster.node_writes() == []
    assert cordoned(node(cluster, "n1"))


def test_the_unavailable_limit_counts_nodes_already_cordoned(cluster: MigCluster) -> None:
    """4 MIG nodes at 25 %: one may be unschedulable, and an admin's cordon already takes that place."""
    for name in ("n1", "n2", "n3"):
        cluster.add(name, allocatable=OLD)
    cluster.add("n4", allocatable=OLD, unschedulable=True)
    cluster.add("cpu", config=None, state=None, capable=False, unschedulable=True)  # not a MIG node
    report, _ = apply(cluster, [change("n1"), change("n2")], ApplyOptions(timeout=30.0, poll=0.05))
    assert [r.outcome for r in report.results] == ["skipped-limit", "skipped-limit"]
    assert "1 of 4 MIG nodes unschedulable, limit 1" in report.results[0].message
    assert cluster.node_writes() == []
    assert report.ok


def test_a_failed_node_stays_cordoned_and_counts_against_the_limit(cluster: MigCluster) -> None:
    """8 MIG nodes at 25 %: 2 at once. An admin holds one; n1 fails and keeps the other; n2 must wait."""
    cluster.add("n1", allocatable=OLD, mode="failed")
    for name in ("n2", "n3", "n4", "n5", "n6", "n7"):
        cluster.add(name, allocatable=OLD)
    cluster.add("n8", allocatable=OLD, unschedulable=True)
    options = ApplyOptions(timeout=30.0, allocatable_timeout=30.0, poll=0.05, keep_going=True)
    report, _ = apply(cluster, [change("n1"), change("n2"), change("n3")], options)
    assert [r.outcome for r in report.results] == ["failed", "skipped-limit", "skipped-limit"]
    assert cluster.node_writes() == [("n1", "cordon"), ("n1", "relabel")]


def test_with_keep_going_the_next_node_is_tried_after_a_failure_within_the_limit(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, mode="failed")
    cluster.add("n2", allocatable=OLD)
    options = ApplyOptions(timeout=30.0, allocatable_timeout=30.0, poll=0.05, max_unavailable=1.0, keep_going=True)
    report, _ = apply(cluster, [change("n1"), change("n2")], options)
    assert [r.outcome for r in report.results] == ["failed", "applied"]


def test_by_default_the_run_stops_at_the_first_failure(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, mode="failed")
    cluster.add("n2", allocatable=OLD)
    report, _ = apply(cluster, [change("n1"), change("n2")])
    assert [r.outcome for r in report.results] == ["failed", "skipped-stopped"]
    assert all(name == "n1" for name, _ in cluster.node_writes())
    assert node(cluster, "n2")["metadata"]["labels"][CONFIG] == "all-3g.20gb"


def test_nodes_are_reconfigured_one_at_a_time_in_the_given_order(cluster: MigCluster) -> None:
    for name in ("n1", "n2", "n3"):
        cluster.add(name, allocatable=OLD)
    report, _ = apply(cluster, [change("n3"), change("n1", "all-1g.5gb"), change("n2")])
    assert [r.outcome for r in report.results] == ["applied"] * 3
    steps = ["cordon", "relabel", "uncordon"]
    assert cluster.node_writes() == [(n, s) for n in ("n3", "n1", "n2") for s in steps]


def test_a_node_already_on_its_config_is_unchanged_and_not_patched(cluster: MigCluster) -> None:
    cluster.add("n1", "mixed", "success", LAYOUTS["mixed"])
    report, _ = apply(cluster, [change()])
    assert [r.outcome for r in report.results] == ["unchanged"]
    assert writes(cluster) == []


def account_without(cluster: MigCluster, name: str, verb: str, resource: str) -> Path:
    """A ServiceAccount bound to the shipped roles with one verb on one resource taken out; its kubeconfig."""
    cluster.plane.service_account(NAMESPACE, name)
    objects = []
    for obj in cluster.objects:
        if obj["kind"] in ("ClusterRole", "Role"):
            rules = [
                {**rule, "verbs": [v for v in rule["verbs"] if not (v == verb and resource in rule["resources"])]}
                for rule in obj["rules"]
            ]
            objects.append({**obj, "metadata": {**obj["metadata"], "name": name}, "rules": rules})
        elif obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            subjects = [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
            roles = {**obj["roleRef"], "name": name}
            objects.append(
                {**obj, "metadata": {**obj["metadata"], "name": name}, "roleRef": roles, "subjects": subjects}
            )
    cluster.plane.apply(objects)
    return cluster.plane.service_account_kubeconfig(NAMESPACE, name)


def test_a_refused_patch_is_an_api_error_naming_the_node_and_the_status(cluster: MigCluster) -> None:
    """RBAC without `patch` on nodes: the API server's own 403, as a user whose role lacks it gets it."""
    cluster.add("n1", allocatable=OLD)
    kubeconfig = account_without(cluster, "mig-plan-no-patch", "patch", "nodes")
    report, metrics = apply(cluster, [change()], kubeconfig=kubeconfig)
    (result,) = report.results
    assert result.outcome == "api-error" and not report.ok
    assert "node n1" in result.message and "HTTP 403" in result.message and "not cordoned" in result.message
    assert 'cannot patch resource "nodes"' in result.message
    assert failures(metrics, "api-error") == 1.0
    assert not cordoned(node(cluster, "n1"))
    refused = cluster.requests(service_account_user(NAMESPACE, "mig-plan-no-patch"))
    assert [(r.verb, r.name, r.code) for r in refused if r.verb == "patch"] == [("patch", "n1", 403)]


def test_a_node_deleted_while_reconfiguring_is_vanished(cluster: MigCluster) -> None:
    cluster.add("n1", allocatable=OLD, mode="vanishes")
    report, metrics = apply(cluster, [change()])
    (result,) = report.results
    assert result.outcome == "vanished" and "n1" in result.message and "the node is gone" in result.message
    assert failures(metrics, "vanished") == 1.0
    assert cluster.events() == []  # nothing left to describe
    assert [r.code for r in cluster.requests() if r.verb == "get" and r.resource == "nodes"][-1] == 404


def test_a_node_missing_from_the_start_is_vanished_and_untouched(cluster: MigCluster) -> None:
    report, _ = apply(cluster, [change("gone")])
    assert [r.outcome for r in report.results] == ["vanished"]
    assert writes(cluster) == []
    assert [(r.verb, r.name, r.code) for r in cluster.requests()] == [("get", "gone", 404)]


def test_the_metrics_are_written_in_the_textfile_format(cluster: MigCluster, tmp_path: Path) -> None:
    cluster.add("n1", allocatable=OLD)
    cluster.add("n2", allocatable=OLD, mode="stuck-pending")
    options = ApplyOptions(timeout=4.0, allocatable_timeout=30.0, poll=0.05, max_unavailable=1.0)
    _, metrics = apply(cluster, [change("n1"), change("n2")], options)
    path = tmp_path / "gpupack_mig_apply.prom"
    write_metrics(metrics, path)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }
    assert samples[("gpupack_mig_apply_failures_total", (("reason", "timeout"),))] == 1.0
    assert samples[("gpupack_mig_apply_applied_nodes_total", ())] == 1.0
    assert samples[("gpupack_mig_apply_last_run_timestamp_seconds", ())] > 0


def test_a_node_already_labelled_but_failed_is_reported_not_relabelled_in_vain(cluster: MigCluster) -> None:
    """Setting the same label value again would wait for a MIG manager that never reacts, and time out."""
    cluster.add("n1", "mixed", "failed", unschedulable=True, annotations={ANNOTATION: "mixed"})
    report, _ = apply(cluster, [change()])
    (result,) = report.results
    assert result.outcome == "failed" and "restart the nvidia-mig-manager pod on n1" in result.message
    assert not [r for r in cluster.requests() if r.verb == "patch"]
    assert cordoned(node(cluster, "n1"))


def test_a_node_gpupack_left_cordoned_while_the_mig_manager_was_still_at_work_is_awaited(
    cluster: MigCluster,
) -> None:
    cluster.add("n1", "mixed", "pending", unschedulable=True, annotations={ANNOTATION: "mixed"})
    cluster.manager.reconfigure("n1", "mixed")  # the MIG manager finishes what it started: success, then instances
    report, _ = apply(cluster, [change()])
    assert [(r.node, r.outcome) for r in report.results] == [("n1", "applied")]
    assert cluster.node_writes() == [("n1", "uncordon")]  # no relabel
    assert not cordoned(node(cluster, "n1"))


# the command -----------------------------------------------------------------------------------------------------

M = "nvidia.com/mig-"
BALANCED = {M + "1g.5gb": 16, M + "2g.10gb": 8, M + "3g.20gb": 8}
"""all-balanced on 8 A100-40GB GPUs."""
WHERE = "/".join(LAYOUTS_CONFIG_MAP)


def mig_plan(cluster: MigCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """`gpupack mig-plan --kubeconfig <the ServiceAccount's> ...`, as an admin's workstation runs it."""
    command = [sys.executable, "-m", "gpupack", "mig-plan", "--kubeconfig", str(cluster.kubeconfig), *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env_without_proxy())
    assert forbidden_lines(done.stdout + done.stderr) == [], done.stdout + done.stderr
    return done


def pending(name: str, memory: str) -> dict[str, Any]:
    """A labelled inference pod the scheduler has not placed yet."""
    pod = admitted_pod(name, {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": memory}, namespace="ml")
    del pod["spec"]["priority"]  # the Priority admission plugin sets it
    return pod


@pytest.fixture
def demand(cluster: MigCluster) -> MigCluster:
    """Two free all-balanced nodes, a busy one, one without a GPU count, and pending pods that need 3 GPUs."""
    cluster.add("a100-1", "all-balanced", allocatable=BALANCED)
    cluster.add("a100-2", "all-balanced", allocatable=BALANCED)
    cluster.add("a100-busy", "all-1g.5gb", allocatable={M + "1g.5gb": 56})
    cluster.add("a100-unlabelled", "all-balanced", allocatable=BALANCED, gpus=None)  # no GPU count: not planned
    cluster.manager.layouts.clear()  # the layouts come from the MIG manager's ConfigMap, as in a cluster
    cluster.pod(gpu_pod("embed-0", "a100-busy", M + "1g.5gb"), "Running")
    for i in range(6):
        cluster.pod(pending(f"chat-{i}", "8Gi"))  # 1g.10gb once it is offered
    for i in range(2):
        cluster.pod(pending(f"rerank-{i}", "16Gi"))  # 3g.20gb
    return cluster


def planned(cluster: MigCluster) -> dict[str, Any]:
    """The plan the command makes without --apply."""
    done = mig_plan(cluster, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_apply_relabels_the_free_node_the_plan_needs_and_leaves_the_busy_one(
    demand: MigCluster, tmp_path: Path
) -> None:
    cluster = demand
    doc = planned(cluster)
    assert doc["kept_busy"] == ["a100-busy"]
    assert doc["not_planned"] == {"a100-unlabelled": "GPU count unknown (no nvidia.com/gpu.count label)"}
    # the busy node's 1g.5gb serve its own pod; 2x (3g.20gb + 2x 1g.10gb) and 1x 4x 1g.10gb: 3 GPUs
    assert doc["demand"] == {M + "1g.10gb": 6, M + "1g.5gb": 1, M + "3g.20gb": 2}
    assert doc["gpus_needed"] == 3
    assert [n["node"] for n in doc["nodes"]] == ["a100-1"] and doc["left_as_they_are"] == ["a100-2"]
    (planned_node,) = doc["nodes"]
    output = tmp_path / "mig.yaml"
    cluster.publish({**doc["mig_parted_config"]["mig-configs"], "all-balanced": [], "all-disabled": []})
    metrics = tmp_path / "mig.prom"
    done = mig_plan(
        cluster, "--apply", "--mig-config-map", WHERE, "--poll", "0.05", "--timeout", "60",
        "--metrics-file", str(metrics), "--output", str(output),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a100-1: applied" in done.stdout
    applied = node(cluster, "a100-1")
    assert applied["metadata"]["labels"][CONFIG] == planned_node["config"]
    assert applied["metadata"]["labels"][STATE] == "success"
    assert applied["spec"].get("unschedulable") is None
    offered = {k: int(v) for k, v in applied["status"]["allocatable"].items() if k.startswith(M)}
    assert offered == planned_node["instances"]  # what the device plugin made of the ConfigMap's entries
    assert cluster.node_writes() == [("a100-1", "cordon"), ("a100-1", "relabel"), ("a100-1", "uncordon")]
    assert [(e["type"], e["reason"]) for e in cluster.events()] == [("Normal", "MigReconfigured")]
    for untouched, config in (
        ("a100-2", "all-balanced"),
        ("a100-busy", "all-1g.5gb"),
        ("a100-unlabelled", "all-balanced"),
    ):
        assert node(cluster, untouched)["metadata"]["labels"][CONFIG] == config
    # --output with --mig-config-map: the MIG manager's ConfigMap with the plan's layouts added, the others kept
    written = yaml.safe_load(output.read_text())
    assert (written["kind"], written["metadata"]) == (
        "ConfigMap",
        {"namespace": LAYOUTS_CONFIG_MAP[0], "name": LAYOUTS_CONFIG_MAP[1]},
    )
    layouts = yaml.safe_load(written["data"]["config.yaml"])["mig-configs"]
    assert layouts == {**doc["mig_parted_config"]["mig-configs"], "all-balanced": [], "all-disabled": []}
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples}
    assert samples["gpupack_mig_apply_applied_nodes_total"] == 1


def test_apply_refuses_layouts_the_mig_manager_does_not_know(demand: MigCluster) -> None:
    cluster = demand
    doc = planned(cluster)
    (name,) = {n["config"] for n in doc["nodes"]}
    assert name.startswith("gpupack-a100-40gb-")
    done = mig_plan(cluster, "--apply")
    assert done.returncode == 2 and "give it as --mig-config-map NAMESPACE/NAME" in done.stderr
    done = mig_plan(cluster, "--apply", "--mig-config-map", WHERE)  # the API server answers 404: not created yet
    assert done.returncode == 2 and f"ConfigMap {WHERE} not found" in done.stderr
    cluster.publish({"all-balanced": []})
    done = mig_plan(cluster, "--apply", "--mig-config-map", WHERE)
    assert done.returncode == 2 and f"lacks {name}" in done.stderr
    assert writes(cluster) == []  # nothing was touched
    assert [r.code for r in cluster.requests() if r.resource == "configmaps"] == [404, 200]


@pytest.mark.parametrize(("mode", "outcome"), [("stuck-pending", "timeout"), ("failed", "failed")])
def test_a_node_the_mig_manager_fails_is_left_cordoned_with_its_warning_and_the_run_exits_1(
    demand: MigCluster, tmp_path: Path, mode: Any, outcome: str
) -> None:
    cluster = demand
    doc = planned(cluster)
    cluster.publish(doc["mig_parted_config"]["mig-configs"])
    cluster.manager.modes["a100-1"] = mode
    metrics = tmp_path / "mig.prom"
    done = mig_plan(
        cluster, "--apply", "--mig-config-map", WHERE, "--poll", "0.05", "--timeout", "3",
        "--metrics-file", str(metrics), "--json",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert [(a["node"], a["outcome"]) for a in result["applied"]] == [("a100-1", outcome)]
    found = node(cluster, "a100-1")
    assert found["spec"]["unschedulable"] is True
    assert found["metadata"]["annotations"][ANNOTATION] == doc["nodes"][0]["config"]
    (event,) = cluster.events()
    assert (event["type"], event["reason"], event["involvedObject"]["name"]) == (
        "Warning",
        "MigReconfigureFailed",
        "a100-1",
    )
    assert result["applied"][0]["message"] in event["message"]
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text())}
    (sample,) = [s for s in families["gpupack_mig_apply_failures"].samples if s.name.endswith("_total")]
    assert sample.labels == {"reason": outcome} and sample.value == 1


def test_the_shipped_rbac_allows_every_request_an_apply_makes_and_no_more(demand: MigCluster) -> None:
    cluster = demand
    doc = planned(cluster)
    cluster.publish(doc["mig_parted_config"]["mig-configs"])
    done = mig_plan(cluster, "--apply", "--mig-config-map", WHERE, "--poll", "0.05", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    made = cluster.requests()
    assert {r.code for r in made} <= {200, 201}, [(r.verb, r.uri, r.code) for r in made if r.code > 201]
    used = verbs(made)
    assert used == {
        ("list", "", "nodes"), ("list", "", "pods"), ("list", "resource.k8s.io", "resourceslices"),
        ("get", "", "nodes"), ("patch", "", "nodes"), ("create", "", "events"), ("get", "", "configmaps"),
    }  # fmt: skip
    # no more: every rule the manifests grant is one the apply needs
    assert granted(cluster.objects) == used
    # and the authorizer refuses what the roles do not grant
    for verb, resource, namespace, name, subresource in (
        ("delete", "nodes", None, "a100-1", None),
        ("update", "nodes", None, "a100-1", None),
        ("patch", "nodes", None, "a100-1", "status"),  # allocatable is the device plugin's
        ("get", "configmaps", "gpu-operator", "default-mig-parted-config", None),
        ("get", "configmaps", "kube-system", LAYOUTS_CONFIG_MAP[1], None),
        ("create", "events", "ml", None, None),  # Node events only, in default
        ("delete", "pods", "ml", "chat-0", None),  # it never evicts
    ):
        assert not subject_can(cluster.plane, USER, verb, resource, namespace, name, subresource=subresource), verb
    for verb, resource, namespace, name in (("patch", "nodes", None, "a100-2"), ("create", "events", "default", None)):
        assert subject_can(cluster.plane, USER, verb, resource, namespace, name)
