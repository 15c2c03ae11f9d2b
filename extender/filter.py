"""Which nodes a pod must not go to, and why; a pure function per node.

Three reasons, in this order:
- a spot node for a pod that must never run there (inference, StatefulSet pods, classes that forbid spot):
  unresolvable, no preemption changes what the node is;
- no free unit of the pod's GPU resource, counting assumed pods: resolvable by preemption when the node
  offers that resource at all, unresolvable when it does not;
- for latency-critical inference, every GPU of the node is busier than the hot threshold: unresolvable. The
  utilization is a mean over a window of minutes (5 by default), so killing a neighbour cannot cool the GPU
  before kube-scheduler retries the pod: called resolvable, kube-scheduler would preempt pods here, and the
  extender would refuse the node again (issue #22's six victims for three pods). A node missing data for some
  GPU is never filtered for it: lack of data must not stop scheduling.

"Unresolvable" is `FailedAndUnresolvableNodes`: kube-scheduler does not try preemption on such a node. Only
"insufficient" is resolvable: victims free units of the pod's resource (the preempt verb,
`extender.preemption`, checks the victims it proposes do).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupack.core.policy import Policy
from gpupack.extender.demand import PodDemand
from gpupack.extender.snapshot import NodeSnapshot


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a node is filtered out; `unresolvable` means preemption cannot help there."""

    kind: str
    """A short stable name for metrics: spot, no-resource, insufficient, hot."""
    reason: str
    unresolvable: bool


def reject(demand: PodDemand, snap: NodeSnapshot, policy: Policy) -> Rejection | None:
    """None when the pod may go to the node, else the first reason it may not."""
    node = snap.node
    if demand.avoid_spot and node.spot:
        who = demand.workload or "these"
        return Rejection("spot", f"spot node ({node.spot}): {who} pods never run on spot", True)
    resource = demand.gpu_resource
    if resource is not None:
        offered = node.allocatable.get(resource, 0)
        if offered <= 0:
            return Rejection("no-resource", f"node offers no {resource}", True)
        free = snap.free(resource)
        if free < demand.gpu_count:
            return Rejection(
                "insufficient", f"{free} of {offered} {resource} free, pod needs {demand.gpu_count}", False
            )
    hot = policy.extender.hot_threshold
    utils = snap.utils
    if demand.latency_critical and utils and len(utils) >= node.gpu_count and min(utils) > hot:
        # No "%" in a reason: kube-scheduler formats the extender's reasons into its FailedScheduling message as a
        # format string, and "85%" became "85%!((MISSING)" there (seen on a real kube-scheduler v1.36).
        coolest = round(100 * min(utils))
        return Rejection(
            "hot", f"every GPU is above the hot threshold {hot * 100:.0f} pct (coolest at {coolest} pct)", True
        )
    return None
