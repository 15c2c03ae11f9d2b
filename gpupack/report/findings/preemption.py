"""Preemption churn: pods kube-scheduler killed to make room for higher-priority ones, how many, which workloads
lost the most and what to change so they stop losing them.

The numbers are kube-scheduler's over the window (`gpupack.report.churn`: attempts, preemptions, victims per
scrape job); the workloads are those of the victims its `Preempted` Events name (`gpupack.report.victims`), which
cover the API server's `--event-ttl` (1 h by default) rather than the window. One finding for the cluster, its
severity by victims per day (`Thresholds.preemption_medium`, `preemption_high`), the more of the two sources
counted (Prometheus may scrape only one of two schedulers; Events may have expired). A victim that died while
another node would have taken its preemptor with lower-priority victims only (`gpupack.report.outranked`) is named,
and makes the finding at least medium: priority is the admin's own order of what may die first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpupack.core import contract
from gpupack.core.objects import controller_kind, is_statefulset_pod, labels_of
from gpupack.report.churn import Churn
from gpupack.report.cluster import gpu_resources
from gpupack.report.document import Finding, Severity, iso
from gpupack.report.findings.inputs import Inputs
from gpupack.report.findings.risks import BATCH_OWNERS, serving
from gpupack.report.outranked import Outranked, describe, outranked
from gpupack.report.victims import Victim, preempted

TOP = 5
"""Workloads named in the evidence, most pods lost first."""
EVENTS_COMMAND = "kubectl get events -A --field-selector reason=Preempted -o json"
SCHEDULER_CONFIG = "manifests/extender/scheduler-config.yaml"
Role = Literal["batch", "checkpointing", "serving"]
"""Run-to-completion work, such work that checkpoints, or a service."""


@dataclass(frozen=True, slots=True)
class Loss:
    """One workload's victims."""

    workload: str
    pods: int
    gpu_pods: int
    unknown: int
    """Victims whose resources are unknown (gone, and no live pod of their controller)."""
    role: Role | None
    """None: unknown, or its victims were of several kinds."""


def _role(victim: Victim) -> Role | None:
    """What kind of work the victim was, from its pod (or a live pod of its controller), else its workload's kind."""
    pod = victim.template
    if pod is None:
        return "serving" if victim.workload.startswith(("Deployment ", "StatefulSet ")) else None
    labels = labels_of(pod)
    said = labels.get(contract.LABEL_WORKLOAD)
    if said in ("training", "batch") or (said is None and controller_kind(pod) in BATCH_OWNERS):
        return "checkpointing" if labels.get(contract.LABEL_CHECKPOINT) == "true" else "batch"
    if is_statefulset_pod(pod) or serving(pod) is not None:
        return "serving"
    return None


def losses(victims: Sequence[Victim], inputs: Inputs) -> list[Loss]:
    """Per workload, its victims; most pods first, then by name."""
    grouped: dict[str, list[Victim]] = {}
    for victim in victims:
        grouped.setdefault(victim.workload, []).append(victim)
    out = []
    for name, group in grouped.items():
        known = [v for v in group if v.template is not None]
        gpu = sum(1 for v in known if v.template is not None and gpu_resources(v.template, inputs.policy))
        roles = {_role(v) for v in group} - {None}
        role = next(iter(roles)) if len(roles) == 1 else None
        out.append(Loss(name, len(group), gpu, len(group) - len(known), role))
    return sorted(out, key=lambda loss: (-loss.pods, loss.workload))


def _loss_text(loss: Loss) -> str:
    gpu = f"{loss.gpu_pods} on GPUs" + (f", {loss.unknown} unknown" if loss.unknown else "")
    return f"{loss.workload}: {loss.pods} pod{'s' if loss.pods != 1 else ''} ({gpu})"


def _schedulers(churn: Churn) -> str:
    def count(value: int | None) -> str:
        return "-" if value is None else str(value)

    return "; ".join(
        f"{s.job or '(no job label)'}: {count(s.victims)} victims, {count(s.preemptions)} preemptions, "
        f"{count(s.attempts)} attempts"
        for s in churn.schedulers
    )


def _ratio(part: int | None, whole: int | None) -> float | None:
    return None if part is None or not whole else round(part / whole, 2)


def _action(top: Sequence[Loss], victims: Sequence[Victim] | None, lower: Sequence[Outranked], inputs: Inputs) -> str:
    """What to change, for the kinds of work that lost pods."""
    names = {role: [loss.workload for loss in top if loss.role == role] for role in ("batch", "serving")}
    parts = []
    if lower:
        first = lower[0]
        parts.append(
            f"{first.victim} (priority {first.priority}) died while {first.other_node} would have taken its "
            f"preemptor with victims of priority {first.other_priority} at most: check whether a "
            f"PodDisruptionBudget guards {', '.join(first.other_victims)} (kube-scheduler spares PDBs before "
            "priority), whether the node was hot, and that the gpupack extender answering the preempt verb ranks "
            "victims by priority first (a build from before that rule, see CHANGELOG.md, ranks its own classes first)"
        )
    if names["batch"]:
        parts.append(
            f"move {', '.join(names['batch'])} to a spot or checkpointing pool ({contract.LABEL_WORKLOAD}=training "
            f'or batch: gpupack prefers or requires spot for them) and set {contract.LABEL_CHECKPOINT}: "true" where '
            "the job checkpoints, so a preemption costs the work since the last checkpoint, not the run"
        )
    if names["serving"]:
        inference = inputs.policy.classes.inference.priority_class_name or "the inference PriorityClass"
        parts.append(
            f"keep {', '.join(names['serving'])} from being a victim: give latency-critical inference a reserved "
            f"pool (nodes tainted for it alone), or raise its PriorityClass above its preemptors' ({inference})"
        )
    if victims is None:
        parts.append(
            f"name the workloads that lost pods: run with --kubeconfig, or --cluster with `{EVENTS_COMMAND}` "
            "(Events last the API server's --event-ttl, 1 h by default)"
        )
    if victims is None or any(loss.gpu_pods or loss.unknown for loss in top):
        parts.append(
            "check that the gpupack extender's entry in the KubeSchedulerConfiguration names preemptVerb: preempt "
            f"({SCHEDULER_CONFIG}): without it kube-scheduler picks GPU victims without asking the extender"
        )
    if not parts:
        parts.append("raise the victims' PriorityClass if they must stay, or give them their own capacity")
    return "; ".join(parts)


def _severity(per_day: float, lower: Sequence[Outranked], inputs: Inputs) -> Severity:
    if per_day >= inputs.thresholds.preemption_high:
        return "high"
    return "medium" if per_day >= inputs.thresholds.preemption_medium or lower else "low"


def findings(inputs: Inputs) -> list[Finding]:
    """`preemption-churn`: once for the cluster when kube-scheduler preempted a pod in the window (by its
    metrics or its Events); none when neither source is there or says so."""
    churn = inputs.churn
    attempts = None if churn is None else churn.attempts
    preemptions = None if churn is None else churn.preemptions
    metric_victims = None if churn is None else churn.victims
    victims = preempted(inputs.cluster, inputs.usage.window) if inputs.cluster is not None else None
    counted = max(metric_victims or 0, len(victims or ()))
    if not counted:
        return []
    per_day = counted / (inputs.usage.window.hours / 24.0)
    every = losses(victims or (), inputs)
    top = every[:TOP]
    gpu = None if victims is None else sum(loss.gpu_pods for loss in every)
    preemptors: dict[str, int] = {}
    for victim in victims or ():
        if victim.preemptor_workload is not None:
            preemptors[victim.preemptor_workload] = preemptors.get(victim.preemptor_workload, 0) + 1
    by = [f"{name}: {n}" for name, n in sorted(preemptors.items(), key=lambda item: (-item[1], item[0]))[:TOP]]
    if unknown := sum(1 for victim in victims or () if victim.preemptor_workload is None):
        by.append(f"unknown: {unknown}")  # gone: the message names its uid only
    lower = outranked(victims, inputs.cluster, inputs.policy) if victims and inputs.cluster is not None else []
    return [
        Finding(
            "preemption-churn",
            _severity(per_day, lower, inputs),
            _action(top, victims, lower, inputs),
            workload=top[0].workload if top else None,
            evidence={
                "victims": metric_victims,
                "victims_per_day": round(per_day, 2),
                "attempts": attempts,
                "preemptions": preemptions,
                "victims_per_attempt": _ratio(metric_victims, attempts),
                "victims_per_preemption": _ratio(metric_victims, preemptions),
                "schedulers": None if churn is None else _schedulers(churn),
                "event_victims": None if victims is None else len(victims),
                "event_gpu_victims": gpu,
                "events_from": iso(victims[0].at) if victims else None,
                "events_to": iso(victims[-1].at) if victims else None,
                "top_workloads": "; ".join(_loss_text(loss) for loss in top) or None,
                "preemptors": "; ".join(by) or None,
                "outranked_victims": None if victims is None else len(lower),
                "outranked": describe(lower[:TOP]) or None,
            },
        )
    ]
