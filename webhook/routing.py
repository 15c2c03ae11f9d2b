"""Which scheduler takes an opted-in GPU pod: `spec.schedulerName` names the policy's scheduler while it is alive.

Labels alone route nothing: a second scheduler takes only the pods that name it, so the webhook names it. The
API server writes `default-scheduler` into every pod that names none before webhooks run, so that value (or
none) means the pod did not choose; any other value is the pod's own choice, kept with a warning unless the
policy enforces `scheduler`. The policy's rule is "its scheduler while that scheduler has a live leader, else
the default": a pod is never sent to a scheduler nobody runs, where it would stay Pending forever.
"""

from __future__ import annotations

from gpupack.core.contract import DEFAULT_SCHEDULER
from gpupack.core.k8s import Pod
from gpupack.core.lease import SchedulerStatus
from gpupack.core.policy import Policy
from gpupack.webhook.outcome import Notes
from gpupack.webhook.patches import PatchBuilder

SPEC = ("spec",)


def route(pod: Pod, builder: PatchBuilder, policy: Policy, status: SchedulerStatus, notes: Notes) -> None:
    """Set `schedulerName` as the policy says, given the verdict on its scheduler (`status`).

    A pod left on (or moved to) the default scheduler because the policy's scheduler is not live is marked in
    `notes.unrouted`; a pod that keeps a scheduler of its own choosing is not: it went where it asked.
    """
    target = policy.scheduler.name
    if target is None:
        return
    own = pod.spec.scheduler_name
    chose = own not in (None, "", DEFAULT_SCHEDULER)
    enforced = policy.enforces("scheduler")
    if chose and own != target and not enforced:
        notes.add("conflict", f"kept schedulerName {own} from the pod; the policy sends GPU pods to {target}")
        return
    if status.live:
        if own != target:  # the same value again (a re-invocation) is no change: idempotent
            builder.set(SPEC, "schedulerName", target)
            if chose:
                notes.add("scheduler", f"schedulerName {target} replaces the pod's {own} (policy enforces scheduler)")
            else:
                notes.add("scheduler", f"schedulerName {target}: scheduled with the gpupack extender")
        return
    if own == target and not enforced:
        notes.add("conflict", f"pod names {target}, kept, but it has no live leader ({status.detail}): it waits")
        return
    notes.unrouted = status
    if chose:
        builder.set(SPEC, "schedulerName", DEFAULT_SCHEDULER)
        notes.add("scheduler", f"{target} has no live leader ({status.detail}): {DEFAULT_SCHEDULER} replaces {own}")
        return
    notes.add("advice", f"{target} has no live leader ({status.detail}): left on {DEFAULT_SCHEDULER}, not packed")
