"""Which scheduler an opted-in GPU pod is sent to: the policy's while it has a live leader, else the default; the
pod's own choice kept unless enforced; idempotent, recorded in audit mode, off with `scheduler.name: null`."""

from __future__ import annotations

from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from gpupack.core.lease import ASSUMED_LIVE, LIVE, NO_API, NOT_READ_YET, SchedulerStatus
from gpupack.webhook.mutate import Decision, MutationContext, plan
from tests.conftest import W, context, make_pod

EXPIRED = SchedulerStatus(False, "expired", "lease expired 40s ago")
MISSING = SchedulerStatus(False, "missing", "lease not found")
GPU_POD = {W + "workload": "inference", W + "gpu-memory": "8Gi"}
ENFORCE = "enforce: [scheduler]"


def decide(pod: dict[str, Any], status: SchedulerStatus, doc: str = "", opted_in: bool = False) -> Decision:
    base = context(doc, opted_in=opted_in)
    ctx = MutationContext(base.policy, base.version, base.facts, base.namespace_opted_in, status)
    return plan(pod, pod["metadata"]["namespace"], ctx)


def scheduler_of(pod: dict[str, Any], decision: Decision) -> str | None:
    name: str | None = jsonpatch.apply_patch(pod, decision.ops)["spec"].get("schedulerName")
    return name


def scheduler_warnings(decision: Decision) -> list[str]:
    return [w for w in decision.warnings if "schedulerName" in w or "leader" in w]


ROUTING = [
    # (the pod's schedulerName, policy, verdict) -> (schedulerName after, warning fragment or None, unrouted reason)
    ("default-scheduler", "", LIVE, "gpupack-scheduler", "schedulerName gpupack-scheduler: scheduled with", None),
    (None, "", LIVE, "gpupack-scheduler", "schedulerName gpupack-scheduler", None),
    ("", "", LIVE, "gpupack-scheduler", "schedulerName gpupack-scheduler", None),
    ("gpupack-scheduler", "", LIVE, "gpupack-scheduler", None, None),
    (
        "default-scheduler",
        "",
        EXPIRED,
        "default-scheduler",
        "(lease expired 40s ago): left on default-scheduler",
        "expired",
    ),
    ("default-scheduler", "", MISSING, "default-scheduler", "(lease not found): left on default-scheduler", "missing"),
    ("default-scheduler", "", NO_API, "default-scheduler", "no API access", "unreadable"),
    ("default-scheduler", "", NOT_READ_YET, "default-scheduler", "lease not read yet", "not-read-yet"),
    ("my-scheduler", "", LIVE, "my-scheduler", "kept schedulerName my-scheduler from the pod", None),
    ("my-scheduler", "", EXPIRED, "my-scheduler", "kept schedulerName my-scheduler from the pod", None),
    (
        "my-scheduler",
        ENFORCE,
        LIVE,
        "gpupack-scheduler",
        "gpupack-scheduler replaces the pod's my-scheduler (policy enforces",
        None,
    ),
    ("my-scheduler", ENFORCE, EXPIRED, "default-scheduler", "default-scheduler replaces my-scheduler", "expired"),
    ("gpupack-scheduler", "", EXPIRED, "gpupack-scheduler", "pod names gpupack-scheduler, kept, but it has no", None),
    (
        "gpupack-scheduler",
        ENFORCE,
        EXPIRED,
        "default-scheduler",
        "default-scheduler replaces gpupack-scheduler",
        "expired",
    ),
    ("default-scheduler", ENFORCE, EXPIRED, "default-scheduler", "left on default-scheduler, not packed", "expired"),
]


@pytest.mark.parametrize(("own", "doc", "status", "after", "warning", "unrouted"), ROUTING)
def test_gpu_pod_goes_to_the_gpupack_scheduler_while_it_is_live_else_to_the_default(
    own: str | None, doc: str, status: SchedulerStatus, after: str | None, warning: str | None, unrouted: str | None
) -> None:
    pod = make_pod(GPU_POD, schedulerName=own)
    if own is None:
        del pod["spec"]["schedulerName"]
    decision = decide(pod, status, doc)
    assert decision.allowed and decision.outcome == "mutated"
    assert (scheduler_of(pod, decision) or None) == (after or None)
    found = scheduler_warnings(decision)
    if warning is None:
        assert found == []
    else:
        assert len(found) == 1 and warning in found[0], found
    assert (decision.unrouted.reason if decision.unrouted else None) == unrouted


@pytest.mark.parametrize(("own", "doc", "status", "after", "warning", "unrouted"), ROUTING)
def test_every_routed_pod_validates_against_the_pod_schema(
    own: str | None, doc: str, status: SchedulerStatus, after: str | None, warning: str | None, unrouted: str | None
) -> None:
    pod = make_pod(GPU_POD, schedulerName=own or "default-scheduler")
    patched = jsonpatch.apply_patch(pod, decide(pod, status, doc).ops)
    kubernetes_validate.validate(patched, kubernetes_validate.latest_version(), strict=True)


def test_the_change_is_counted_as_a_scheduler_mutation_and_leaving_a_pod_alone_is_not() -> None:
    pod = make_pod(GPU_POD)
    assert "scheduler" in decide(pod, LIVE).change_kinds
    assert "scheduler" not in decide(pod, EXPIRED).change_kinds
    assert "scheduler" in decide(make_pod(GPU_POD, schedulerName="mine"), EXPIRED, ENFORCE).change_kinds


@pytest.mark.parametrize("status", [LIVE, EXPIRED])
def test_a_routed_pod_invoked_again_gets_no_operation(status: SchedulerStatus) -> None:
    pod = make_pod(GPU_POD)
    first = decide(pod, status)
    again = decide(jsonpatch.apply_patch(pod, first.ops), status)
    assert again.ops == []


def test_a_pod_routed_while_live_is_left_where_it_is_when_invoked_again_after_the_leader_died() -> None:
    pod = make_pod(GPU_POD)
    routed = jsonpatch.apply_patch(pod, decide(pod, LIVE).ops)
    again = decide(routed, EXPIRED)
    assert again.ops == [] and again.unrouted is None  # it named gpupack-scheduler: kept, with a warning
    assert any("it waits" in w for w in again.warnings)


def test_audit_mode_records_the_routing_and_changes_nothing() -> None:
    pod = make_pod(GPU_POD)
    decision = decide(pod, LIVE, "mode: audit")
    assert decision.outcome == "audited"
    assert [op["path"] for op in decision.ops] == ["/metadata/annotations"]
    assert "schedulerName gpupack-scheduler" in decision.ops[0]["value"]["gpupack.io/audit"]
    assert "gpupack audit, would: schedulerName gpupack-scheduler: scheduled with the gpupack extender" in (
        decision.warnings
    )
    assert "scheduler" in decision.change_kinds  # counted with mode="audit"


def test_audit_mode_records_that_a_pod_would_stay_on_the_default_scheduler() -> None:
    decision = decide(make_pod(GPU_POD), EXPIRED, "mode: audit")
    assert "left on default-scheduler, not packed" in decision.audit_annotations["would"]
    assert decision.unrouted == EXPIRED


@pytest.mark.parametrize("status", [LIVE, EXPIRED])
def test_routing_off_leaves_the_scheduler_alone_and_says_nothing(status: SchedulerStatus) -> None:
    for own in ("default-scheduler", "my-scheduler"):
        pod = make_pod(GPU_POD, schedulerName=own)
        decision = decide(pod, status, "scheduler: {name: null}\nenforce: [scheduler]")
        assert scheduler_of(pod, decision) == own
        assert scheduler_warnings(decision) == [] and decision.unrouted is None


def test_a_policy_may_name_another_scheduler() -> None:
    pod = make_pod(GPU_POD)
    assert scheduler_of(pod, decide(pod, LIVE, "scheduler: {name: gpu-packer}")) == "gpu-packer"


def test_a_gpu_pod_of_an_opted_in_namespace_is_routed_but_a_cpu_statefulset_pod_is_not() -> None:
    resources = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    gpu = make_pod(containers=[{"name": "m", "image": "i", "resources": resources}])
    assert scheduler_of(gpu, decide(gpu, LIVE, opted_in=True)) == "gpupack-scheduler"
    stateful = make_pod(owner="StatefulSet")
    decision = decide(stateful, LIVE, opted_in=True)
    assert decision.outcome == "mutated" and scheduler_of(stateful, decision) == "default-scheduler"


def test_pods_not_opted_in_or_refused_are_never_routed() -> None:
    for pod in (make_pod({"app": "web"}), make_pod({W + "workload": "serving"})):
        decision = decide(pod, LIVE)
        assert decision.ops == [] and decision.unrouted is None


def test_offline_callers_plan_as_if_the_scheduler_were_live() -> None:
    pod = make_pod(GPU_POD)
    assert context().scheduler is ASSUMED_LIVE
    assert scheduler_of(pod, plan(pod, "team-a", context())) == "gpupack-scheduler"


@pytest.mark.parametrize(
    "status",
    [EXPIRED, MISSING, NO_API, NOT_READ_YET, SchedulerStatus(False, "expired", "lease expired 86400s ago")]
    + [
        SchedulerStatus(False, r, d)
        for r, d in [("no-holder", "lease has no holder"), ("unreadable", "lease unreadable: HTTP 403")]
    ],
)
def test_the_unrouted_warning_fits_in_120_characters_without_being_cut(status: SchedulerStatus) -> None:
    (warning,) = scheduler_warnings(decide(make_pod(GPU_POD), status))
    assert len(warning) <= 120 and warning.endswith("left on default-scheduler, not packed")
