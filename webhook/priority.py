"""Priority: `priorityClassName`, `priority` and `preemptionPolicy`, always set together.

The built-in Priority admission plugin runs before mutating webhooks and has already written `priority: 0`;
setting the class alone makes the create fail, and a value different from the stored PriorityClass is refused
(recorded on a v1.36 control plane, see the fixtures' README). So the three fields come from the
PriorityClass as the API stores it; only when the API cannot be read do the policy's values stand in.
"""

from __future__ import annotations

from gpupack.core.cluster import ClusterFacts, PriorityClassInfo
from gpupack.core.k8s import Pod
from gpupack.core.policy import ClassPolicy, Policy
from gpupack.webhook.outcome import Notes
from gpupack.webhook.patches import PatchBuilder


def lookup(name: str, policy: Policy, facts: ClusterFacts) -> tuple[PriorityClassInfo | None, str]:
    """The class's value and where it came from; the API, when it was read, is the only truth."""
    if facts.priority_classes is not None:
        return facts.priority_classes.get(name), "the API"
    spec = policy.priority_classes.get(name)
    if spec is None:
        return None, "the policy"
    return PriorityClassInfo(spec.value, spec.preemption_policy), "the policy"


def apply_priority(
    pod: Pod, builder: PatchBuilder, policy: Policy, cls: ClassPolicy, facts: ClusterFacts, notes: Notes
) -> None:
    """Set the class's PriorityClass unless the pod names its own (and the policy does not enforce priority)."""
    name = cls.priority_class_name
    own = pod.spec.priority_class_name
    if name is None or own == name:
        return
    if own and not policy.enforces("priority"):
        notes.add("conflict", f"kept priorityClassName {own} from the pod; policy class is {name}")
        return
    info, source = lookup(name, policy, facts)
    if info is None:
        notes.add("advice", f"PriorityClass {name} not found in {source}: priority left as it is")
        return
    builder.set_many(
        ("spec",),
        {"priorityClassName": name, "priority": info.value, "preemptionPolicy": info.preemption_policy},
    )
    replaced = f", replacing {own}" if own else ""
    notes.add("priority", f"priority class {name} ({info.value}, {info.preemption_policy}){replaced}")
