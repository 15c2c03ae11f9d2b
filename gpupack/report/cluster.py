"""The cluster the report judges: nodes, pods, PodDisruptionBudgets, DaemonSets and Events as the API returns them,
with the ResourceSlices of a DRA driver's GPUs and the ResourceClaims holding them where there are any, from
`kubectl get nodes,pods,pdb,daemonsets,events,resourceslices,resourceclaims -A -o json` or read through the API
(`gpupack.core.kube.KubeClusterObjects`, which lists only the Events kube-scheduler writes on preemption victims).

Objects stay raw JSON (the findings read a few fields each); this module answers the questions several findings
ask: which pods run on a node, what a pod requests, which workload owns it, whether a node is spot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpupack.core import contract
from gpupack.core.dra import NodeGpus, gpus_by_node, held_by_pod, node_with_gpus, pod_with_devices
from gpupack.core.objects import controller_of, is_finished, labels_of
from gpupack.core.policy import Policy
from gpupack.extender.demand import DemandError, pod_requests
from gpupack.extender.inventory import node_from_json

MAX_CLUSTER_BYTES = 2 * 1024**3
"""The largest cluster file read (150,000 pods are about 1 GB of `kubectl get -o json`)."""
KINDS = {
    "Node": "nodes",
    "Pod": "pods",
    "PodDisruptionBudget": "pdbs",
    "DaemonSet": "daemonsets",
    "Event": "events",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
}


class ClusterError(ValueError):
    """A cluster file that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class Cluster:
    """The objects, grouped by kind."""

    nodes: tuple[dict[str, Any], ...] = ()
    pods: tuple[dict[str, Any], ...] = ()
    pdbs: tuple[dict[str, Any], ...] = ()
    daemonsets: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    """core/v1 Events (`gpupack.report.victims` reads those with reason `Preempted`)."""
    source: str = "cluster"
    dra: Mapping[str, NodeGpus] = field(default_factory=dict)
    """The GPUs a DRA driver publishes, by node (already in those nodes' allocatable)."""
    claimed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per pod UID, the GPU resources its own ResourceClaims hold (already in its requests, `dra.held_by_pod`)."""
    _by_node: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def node_by_name(self) -> dict[str, dict[str, Any]]:
        """Nodes by name."""
        return {name(n): n for n in self.nodes}

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to `node` that have not finished."""
        if not self._by_node:
            for pod in self.pods:
                where = (pod.get("spec") or {}).get("nodeName")
                if where and not is_finished(pod):
                    self._by_node.setdefault(where, []).append(pod)
        return self._by_node.get(node, [])


def name(obj: Mapping[str, Any]) -> str:
    """`metadata.name`."""
    return str((obj.get("metadata") or {}).get("name") or "")


def uid(obj: Mapping[str, Any]) -> str:
    """`metadata.uid`, empty when absent or malformed."""
    meta = obj.get("metadata")
    found = meta.get("uid") if isinstance(meta, dict) else None
    return found if isinstance(found, str) else ""


def key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, as DCGM's pod labels and the findings name pods."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """`metadata.annotations`, empty when absent or malformed."""
    found = (obj.get("metadata") or {}).get("annotations")
    return found if isinstance(found, dict) else {}


def workload(pod: Mapping[str, Any]) -> str | None:
    """`Kind namespace/name` of the controller a person manages: a ReplicaSet resolves to its Deployment (the
    ReplicaSet's name is the Deployment's plus `-<pod-template-hash>`), a Job to itself."""
    owner = controller_of(pod)
    if owner is None:
        return None
    kind, owner_name = str(owner.get("kind") or ""), str(owner.get("name") or "")
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    template_hash = labels_of(pod).get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and owner_name.endswith(f"-{template_hash}"):
        return f"Deployment {namespace}/{owner_name.removesuffix(f'-{template_hash}')}"
    return f"{kind} {namespace}/{owner_name}"


def requests(pod: Mapping[str, Any], policy: Policy) -> dict[str, int]:
    """What the pod requests, as the extender reads it (`extender.demand.pod_requests`); empty when unreadable."""
    try:
        return pod_requests(pod.get("spec") or {}, policy.time_slicing.resource_name)
    except DemandError:
        return {}


def gpu_resources(pod: Mapping[str, Any], policy: Policy) -> dict[str, int]:
    """The GPU resources the pod requests (whole GPUs, time-sliced replicas, MIG instances)."""
    shared = policy.time_slicing.resource_name
    return {r: n for r, n in requests(pod, policy).items() if contract.is_gpu_resource(r, shared) and n > 0}


def gpu_nodes_of(cluster: Cluster, policy: Policy) -> list[dict[str, Any]]:
    """The nodes advertising a GPU resource (only they can take the replayed pods). Raises ClusterError naming
    the node whose object the extender cannot read."""
    out = []
    for node in cluster.nodes:
        try:
            record = node_from_json(node, policy)
        except ValueError as exc:
            raise ClusterError(f"{cluster.source}: {exc}") from exc
        if record.gpu_resources:
            out.append(node)
    return out


def from_objects(objects: Iterable[Mapping[str, Any]], source: str = "cluster") -> Cluster:
    """Group objects by kind; other kinds are ignored (a `kubectl get all` output works too). A node whose GPUs
    a DRA driver publishes in ResourceSlices is read with them in its allocatable (`dra.node_with_gpus`), as the
    device plugin would list them, and a pod whose ResourceClaims hold such devices with them in its requests
    (`dra.pod_with_devices`), so every finding counts them."""
    grouped: dict[str, list[dict[str, Any]]] = {v: [] for v in KINDS.values()}
    for obj in objects:
        group = KINDS.get(str(obj.get("kind") or ""))
        if group is not None and isinstance(obj, dict):
            grouped[group].append(obj)
    gpus = gpus_by_node(grouped["resourceslices"])
    held = held_by_pod(grouped["resourceclaims"], gpus)
    return Cluster(
        nodes=tuple(dict(node_with_gpus(n, gpus.get(name(n)))) for n in grouped["nodes"]),
        pods=tuple(dict(pod_with_devices(p, held.get(uid(p)))) for p in grouped["pods"]),
        pdbs=tuple(grouped["pdbs"]),
        daemonsets=tuple(grouped["daemonsets"]),
        events=tuple(grouped["events"]),
        source=source,
        dra=gpus,
        claimed=held,
    )


def _items(document: Any, where: str) -> list[Mapping[str, Any]]:
    """The objects of a List (items inheriting the list's kind: `NodeList` items are Nodes), or one object."""
    if not isinstance(document, dict):
        raise ClusterError(f"{where}: expected a JSON object (kubectl get ... -o json)")
    if "items" not in document:
        return [document]
    items = document.get("items")
    if not isinstance(items, list):
        raise ClusterError(f"{where}: `items` must be a list")
    list_kind = str(document.get("kind") or "")
    default = list_kind.removesuffix("List") if list_kind.endswith("List") and list_kind != "List" else ""
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ClusterError(f"{where}: items[{i}] is not an object")
        out.append(item if item.get("kind") or not default else {**item, "kind": default})
    return out


def read_cluster_file(paths: Iterable[Path]) -> Cluster:
    """Objects from `kubectl get nodes,pods,pdb,daemonsets,events -A -o json` output, in one file or several. Raises
    ClusterError (naming the file) or OSError."""
    objects: list[Mapping[str, Any]] = []
    names = []
    for path in paths:
        names.append(path.name)
        size = path.stat().st_size
        if size > MAX_CLUSTER_BYTES:
            raise ClusterError(f"{path}: {size} bytes is more than a cluster's objects ({MAX_CLUSTER_BYTES})")
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ClusterError(f"{path}: not JSON (kubectl get ... -o json): {exc}") from exc
        objects += _items(document, str(path))
    return from_objects(objects, ", ".join(names))
