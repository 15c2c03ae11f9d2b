"""The policy's `scheduler` group: defaults matching the shipped manifests, null turning routing off, and errors
naming the field."""

from __future__ import annotations

import pytest

from gpupack.core.policy import PolicyError, parse_policy


def test_by_default_gpu_pods_go_to_the_shipped_gpupack_scheduler_while_its_lease_is_renewed() -> None:
    scheduler = parse_policy(b"").scheduler
    assert scheduler.name == "gpupack-scheduler"
    assert (scheduler.lease.namespace, scheduler.lease.name) == ("gpupack-system", "gpupack-scheduler")
    assert (scheduler.grace_seconds, scheduler.poll_seconds) == (10.0, 5.0)
    assert not parse_policy(b"").enforces("scheduler")


def test_null_turns_routing_off_and_scheduler_can_be_enforced() -> None:
    policy = parse_policy(b"scheduler: {name: null}\nenforce: [scheduler]")
    assert policy.scheduler.name is None and policy.enforces("scheduler")


def test_a_group_given_partly_keeps_its_other_defaults() -> None:
    scheduler = parse_policy(b"scheduler: {lease: {name: gpu-scheduler}, graceSeconds: 0}").scheduler
    assert (scheduler.lease.namespace, scheduler.lease.name, scheduler.grace_seconds) == (
        "gpupack-system",
        "gpu-scheduler",
        0.0,
    )


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (b"scheduler: {name: default-scheduler}", "scheduler.name: Value error, 'default-scheduler' is where pods go"),
        (b"scheduler: {name: Not_A_Name}", "scheduler.name"),
        (b"scheduler: {lease: {namespace: a.b}}", "scheduler.lease.namespace"),
        (b"scheduler: {lease: {name: ''}}", "scheduler.lease.name"),
        (b"scheduler: {graceSeconds: -1}", "scheduler.graceSeconds"),
        (b"scheduler: {graceSeconds: .inf}", "scheduler.graceSeconds"),
        (b"scheduler: {pollSeconds: 0}", "scheduler.pollSeconds"),
        (b"scheduler: {pollSeconds: 600}", "scheduler.pollSeconds"),
        (b"scheduler: {leaseName: x}", "scheduler.leaseName: Extra inputs are not permitted"),
        (b"enforce: [schedulerName]", "enforce.0"),
    ],
)
def test_invalid_scheduler_settings_name_the_field(doc: bytes, named: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc, "policy.yaml")
    assert named in str(caught.value)


def test_a_poll_slower_than_a_leases_life_is_refused() -> None:
    """Polled every 60 s with no grace, a live scheduler would look dead for most of each minute."""
    with pytest.raises(PolicyError, match=r"pollSeconds \(60\) must be shorter"):
        parse_policy(b"scheduler: {pollSeconds: 60, graceSeconds: 0}")
    assert parse_policy(b"scheduler: {pollSeconds: 20, graceSeconds: 10}").scheduler.poll_seconds == 20
