"""What keeps the node autoscaler from removing an idle or underused GPU node, in its own reason names: Cluster
Autoscaler's for the nodes it manages, Karpenter's for the nodes a NodePool owns (`karpenter`), as the policy's
`autoscalers` name them.

The rules are CA's drain rules (kubernetes/autoscaler `utils/drain`, `simulator`; docs/platform/cluster-autoscaler.md),
pod by pod: mirror pods, DaemonSet pods, finished pods and pods below the expendable priority cutoff never block; a pod
annotated `safe-to-evict: "true"` never blocks; otherwise, in CA's order,

    NotSafeToEvictAnnotation   annotated `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`
    UnmovableKubeSystemPod     a kube-system pod no PodDisruptionBudget covers
    NotReplicated              no controller would recreate it elsewhere
    LocalStorageRequested      a hostPath or disk-backed emptyDir volume not listed in
                               `cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes`
    NotEnoughPdb               a PodDisruptionBudget that covers it allows no disruption now

and for the node, `ScaleDownDisabledAnnotation`. Two more the guide (docs/method.md) names: `no-requests` (a pod without
CPU or memory requests: the autoscaler cannot judge the node), and DaemonSet pods with requests, which count toward the
node's utilization unless CA runs with `--ignore-daemonsets-utilization`. Each finding's evidence names the
autoscaler whose rule it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupack.core import contract
from gpupack.core.objects import controller_of, is_daemonset_pod, labels_of, priority_of
from gpupack.report.cluster import annotations_of, key, workload
from gpupack.report.document import Finding
from gpupack.report.findings import karpenter
from gpupack.report.findings.inputs import Inputs
from gpupack.report.findings.selectors import matches

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SAFE_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
EXPENDABLE_PRIORITY = -10
"""CA's `--expendable-pods-priority-cutoff` default: pods below it are deleted, never block."""

ACTIONS: Mapping[str, str] = {
    "NotSafeToEvictAnnotation": "remove the annotation (or set gpupack.io/checkpoint=true on a training job that "
    "checkpoints: gpupack then leaves the annotation off)",
    "UnmovableKubeSystemPod": "give it a PodDisruptionBudget (CA moves kube-system pods only with one), or annotate "
    'it cluster-autoscaler.kubernetes.io/safe-to-evict: "true"',
    "NotReplicated": "run it from a Deployment, StatefulSet or Job, so something recreates it elsewhere",
    "LocalStorageRequested": "list its scratch volumes in cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
    " or move the data off the node",
    "NotEnoughPdb": "the PodDisruptionBudget allows no disruption: add replicas or relax minAvailable",
    "ScaleDownDisabledAnnotation": f"remove the node annotation {SCALE_DOWN_DISABLED} if the node may go",
    "no-requests": "give every container CPU and memory requests (gpupack's webhook does for labelled GPU pods)",
    "DaemonSetUtilization": "run Cluster Autoscaler with --ignore-daemonsets-utilization, or trim the DaemonSet's "
    "requests",
}


def _local_volumes(pod: Mapping[str, Any]) -> list[str]:
    """Volumes CA counts as local storage: hostPath, and emptyDir not backed by memory."""
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        empty = volume.get("emptyDir")
        if volume.get("hostPath") is not None or (isinstance(empty, dict) and empty.get("medium") != "Memory"):
            out.append(str(volume.get("name") or ""))
    return out


def _pdbs_of(inputs: Inputs, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    assert inputs.cluster is not None
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [
        pdb
        for pdb in inputs.cluster.pdbs
        if (pdb.get("metadata") or {}).get("namespace") == namespace
        and matches((pdb.get("spec") or {}).get("selector"), labels_of(pod))
    ]


def pod_blocker(inputs: Inputs, pod: Mapping[str, Any]) -> str | None:
    """CA's reason this pod keeps its node, or None when CA would move it."""
    found = annotations_of(pod)
    if contract.ANNOTATION_MIRROR_POD in found or is_daemonset_pod(pod):
        return None
    if priority_of(pod) < EXPENDABLE_PRIORITY:
        return None
    safe = found.get(contract.ANNOTATION_SAFE_TO_EVICT)
    if safe == "true":
        return None
    if safe == "false":
        return "NotSafeToEvictAnnotation"
    pdbs = _pdbs_of(inputs, pod)
    if (pod.get("metadata") or {}).get("namespace") == "kube-system" and not pdbs:
        return "UnmovableKubeSystemPod"
    if controller_of(pod) is None:
        return "NotReplicated"
    listed = {v.strip() for v in found.get(SAFE_LOCAL_VOLUMES, "").split(",") if v.strip()}
    if any(volume not in listed for volume in _local_volumes(pod)):
        return "LocalStorageRequested"
    for pdb in pdbs:
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
        if not isinstance(allowed, int) or allowed < 1:
            return "NotEnoughPdb"
    return None


def _without_requests(pod: Mapping[str, Any]) -> list[str]:
    """Containers (app and sidecar) without a CPU or a memory request."""
    out = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict):
            continue
        requests = (container.get("resources") or {}).get("requests") or {}
        if not isinstance(requests, dict) or "cpu" not in requests or "memory" not in requests:
            out.append(str(container.get("name") or "?"))
    return out


def _requests_anything(pod: Mapping[str, Any]) -> bool:
    """Whether a container of the pod requests anything (what counts toward the node's utilization)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(isinstance(c, dict) and (c.get("resources") or {}).get("requests") for c in containers)


CLUSTER_AUTOSCALER = "cluster-autoscaler"


def _finding(
    reason: str,
    node: str,
    util: float | None,
    pod: Mapping[str, Any] | None,
    severity: str,
    autoscaler: str = CLUSTER_AUTOSCALER,
) -> Finding:
    return Finding(
        "scale-down-blocker",
        "info" if severity == "info" else "medium",
        ACTIONS.get(reason) or karpenter.ACTIONS[reason],
        node=node,
        pod=None if pod is None else key(pod),
        workload=None if pod is None else workload(pod),
        evidence={
            "reason": reason,
            "autoscaler": autoscaler,
            "node_util_mean": None if util is None else round(util, 1),
        },
    )


def _karpenter_findings(inputs: Inputs, name: str, node: Mapping[str, Any], util: float | None) -> list[Finding]:
    """Karpenter's blockers of one node it manages, with its own last word on the node where Events hold one."""
    assert inputs.cluster is not None
    now = inputs.usage.window.end
    out = []
    reason = karpenter.node_blocker(node)
    if reason is not None:
        out.append(_finding(reason, name, util, None, "medium", "karpenter"))
    for pod in inputs.cluster.pods_on(name):
        reason = karpenter.pod_blocker(inputs, pod, now)
        if reason is not None:
            out.append(_finding(reason, name, util, pod, "medium", "karpenter"))
    said = karpenter.last_event(inputs.cluster.events, name)
    if said is not None:
        first = out[0] if out else _finding("KarpenterEvent", name, util, None, "medium", "karpenter")
        noted = Finding(
            first.kind,
            first.severity,
            first.action,
            node=first.node,
            pod=first.pod,
            workload=first.workload,
            evidence={**first.evidence, "karpenter_event": said},
        )
        out = [noted, *out[1:]]
    return out


def findings(inputs: Inputs) -> list[Finding]:
    """The blockers of every idle or underused node, by the autoscaler that would remove it."""
    assert inputs.cluster is not None
    autoscalers = inputs.policy.autoscalers
    out: list[Finding] = []
    for name, node_class in inputs.classes.items():
        if node_class not in ("idle", "underused"):
            continue
        util = inputs.nodes[name].util_mean
        node = inputs.cluster.node_by_name.get(name)
        if node is not None and karpenter.manages(node):
            if "karpenter" in autoscalers:
                out += _karpenter_findings(inputs, name, node, util)
        elif CLUSTER_AUTOSCALER in autoscalers:
            out += _cluster_autoscaler_findings(inputs, name, node, util)
        elif "karpenter" in autoscalers:
            out.append(_finding("NotManagedByKarpenter", name, util, None, "medium", "karpenter"))
        out += _unrequested(inputs, name, util)
    return out


def _unrequested(inputs: Inputs, name: str, util: float | None) -> list[Finding]:
    """The guide's rule for every autoscaler: a pod without CPU or memory requests cannot be judged."""
    assert inputs.cluster is not None
    out = []
    for pod in inputs.cluster.pods_on(name):
        if is_daemonset_pod(pod) or contract.ANNOTATION_MIRROR_POD in annotations_of(pod):
            continue
        if _without_requests(pod):
            finding = _finding("no-requests", name, util, pod, "medium")
            out.append(
                Finding(
                    finding.kind,
                    finding.severity,
                    finding.action,
                    node=name,
                    pod=finding.pod,
                    workload=finding.workload,
                    evidence={
                        "reason": "no-requests",
                        "node_util_mean": finding.evidence["node_util_mean"],
                        "containers": ", ".join(_without_requests(pod)),
                    },
                )
            )
    return out


def _cluster_autoscaler_findings(
    inputs: Inputs, name: str, node: Mapping[str, Any] | None, util: float | None
) -> list[Finding]:
    """Cluster Autoscaler's blockers of one node."""
    assert inputs.cluster is not None
    out: list[Finding] = []
    if node is not None and annotations_of(node).get(SCALE_DOWN_DISABLED) == "true":
        out.append(_finding("ScaleDownDisabledAnnotation", name, util, None, "medium"))
    daemons = []
    for pod in inputs.cluster.pods_on(name):
        reason = pod_blocker(inputs, pod)
        if reason is not None:
            out.append(_finding(reason, name, util, pod, "medium"))
        if is_daemonset_pod(pod) and _requests_anything(pod):
            daemons.append(pod)
    if daemons:
        finding = _finding("DaemonSetUtilization", name, util, None, "info")
        out.append(
            Finding(
                finding.kind,
                "info",
                finding.action,
                node=name,
                evidence={**finding.evidence, "daemonset_pods": ", ".join(sorted(key(p) for p in daemons))},
            )
        )
    return out
