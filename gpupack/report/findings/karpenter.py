"""What keeps Karpenter from removing an idle or underused GPU node it manages, in Karpenter's own terms.

The rules are Karpenter v1.15.0's (docs/platform/karpenter.md, read from its source): the node itself must not be
annotated `karpenter.sh/do-not-disrupt: "true"`; no active pod on it may carry an active `do-not-disrupt` (`"true"`,
or a duration it has not yet run, `gpupack.core.autoscalers.karpenter_protects`); and no pod Karpenter would evict
may be matched by a PodDisruptionBudget allowing no disruption now, or by two budgets. Karpenter never reads
Cluster Autoscaler's `safe-to-evict`, and does not stop at pods without a controller or with local storage.

    DoNotDisruptAnnotation      a pod's `karpenter.sh/do-not-disrupt` is in force
    NodeDoNotDisruptAnnotation  the node's own `karpenter.sh/do-not-disrupt: "true"`
    PdbAllowsNoDisruption       a PodDisruptionBudget covering an evictable pod allows none now
    MultiplePdbs                two budgets cover one pod: the eviction API refuses it
    NotManagedByKarpenter       no NodePool owns the node (no `karpenter.sh/nodepool` label), when the policy
                                names Karpenter as the cluster's only autoscaler

Karpenter's own word is added where the cluster's Events hold it: the last `DisruptionBlocked` or
`Unconsolidatable` Event on the node (events last the API server's `--event-ttl`, 1 h by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpupack.core import contract
from gpupack.core.autoscalers import karpenter_protects
from gpupack.core.objects import controller_kind, is_finished, started_at
from gpupack.report.cluster import annotations_of
from gpupack.report.findings.inputs import Inputs
from gpupack.report.findings.selectors import matches
from gpupack.report.victims import event_time

NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
"""On every node a Karpenter NodePool created (`pkg/apis/v1/labels.go`, `NodePoolLabelKey`)."""
DISRUPTED_TAINT: Final = "karpenter.sh/disrupted"
"""The taint Karpenter puts on a node it disrupts; a pod tolerating it is not evicted (`IsEvictable`)."""
EVENT_REASONS: Final = ("DisruptionBlocked", "Unconsolidatable")
"""The Events Karpenter writes on a Node it cannot disrupt (`pkg/events/reason.go`)."""

ACTIONS: Mapping[str, str] = {
    "DoNotDisruptAnnotation": f"remove {contract.ANNOTATION_DO_NOT_DISRUPT} from the pod (or set "
    f"{contract.LABEL_CHECKPOINT}=true on a training job that checkpoints: gpupack then leaves it off); a duration "
    "such as 30m lets Karpenter move the pod once it has run that long",
    "NodeDoNotDisruptAnnotation": f"remove the node annotation {contract.ANNOTATION_DO_NOT_DISRUPT} if the node may go",
    "PdbAllowsNoDisruption": "the PodDisruptionBudget allows no disruption: add replicas or relax minAvailable",
    "MultiplePdbs": "two PodDisruptionBudgets select the pod and the eviction API refuses it: keep one",
    "NotManagedByKarpenter": f"no NodePool owns this node (no {NODEPOOL_LABEL} label), so Karpenter never removes "
    "it: move its workloads to a NodePool's nodes, or add cluster-autoscaler to the policy's autoscalers if "
    "Cluster Autoscaler manages its node group",
    "KarpenterEvent": "Karpenter's own reason is in the evidence (karpenter_event)",
}


def manages(node: Mapping[str, Any]) -> bool:
    """Whether a Karpenter NodePool owns the node."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, dict) and NODEPOOL_LABEL in labels


def _active(pod: Mapping[str, Any]) -> bool:
    return not is_finished(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _evictable(pod: Mapping[str, Any], now: float) -> bool:
    """Whether Karpenter would call the eviction API on the pod (`IsEvictable`): active, not a mirror pod, not
    tolerating the disrupted taint, no `do-not-disrupt` in force."""
    if not _active(pod) or controller_kind(pod) == "Node":
        return False
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    if any(
        isinstance(t, dict)
        and (t.get("key") == DISRUPTED_TAINT or (not t.get("key") and t.get("operator") == "Exists"))
        for t in tolerations
    ):
        return False
    return not karpenter_protects(annotations_of(pod), started_at(pod), now)


def _unready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "False" for c in conditions)


def pod_blocker(inputs: Inputs, pod: Mapping[str, Any], now: float) -> str | None:
    """Karpenter's reason this pod keeps its node at `now`, or None."""
    if _active(pod) and karpenter_protects(annotations_of(pod), started_at(pod), now):
        return "DoNotDisruptAnnotation"
    if not _evictable(pod, now):
        return None
    assert inputs.cluster is not None
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    pdbs = [
        pdb
        for pdb in inputs.cluster.pdbs
        if (pdb.get("metadata") or {}).get("namespace") == meta.get("namespace")
        and matches((pdb.get("spec") or {}).get("selector"), labels if isinstance(labels, dict) else {})
    ]
    if len(pdbs) > 1:
        return "MultiplePdbs"
    for pdb in pdbs:
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow" and _unready(pod):
            continue
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
        if not isinstance(allowed, int) or allowed < 1:
            return "PdbAllowsNoDisruption"
    return None


def node_blocker(node: Mapping[str, Any]) -> str | None:
    """Karpenter's reason the node itself stays, or None."""
    if annotations_of(node).get(contract.ANNOTATION_DO_NOT_DISRUPT) == "true":
        return "NodeDoNotDisruptAnnotation"
    return None


def last_event(events: Sequence[Mapping[str, Any]], node: str) -> str | None:
    """`Reason: message` of Karpenter's last `DisruptionBlocked` or `Unconsolidatable` Event on the node."""
    found: list[tuple[float, str]] = []
    for event in events:
        regarding = event.get("involvedObject") or event.get("regarding") or {}
        if event.get("reason") not in EVENT_REASONS or not isinstance(regarding, dict):
            continue
        if regarding.get("kind") != "Node" or regarding.get("name") != node:
            continue
        words = event.get("message") or event.get("note") or ""
        found.append((event_time(event) or 0.0, f"{event['reason']}: {words}".strip()))
    return max(found)[1] if found else None
