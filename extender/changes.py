"""What one watch event changes in the cluster state: nodes reduced to `NodeRecord`, pods to (node, requests),
NVIDIA's DRA driver's ResourceSlices to `DriverSlice` and ResourceClaims to the devices they hold.

Pure functions, shared by the informer (in its worker threads), the offline list files and the benchmarks.
A pod counts on its node when bound and not finished; its key is its uid (else namespace/name), as the
assume cache keys it, so a pod seen bound replaces its assumption.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpupack.core.dra import ClaimDevices, DriverSlice, claim_from_json, slice_from_json
from gpupack.core.kube import Kind
from gpupack.core.objects import is_daemonset_pod, is_finished, priority_of, started_at
from gpupack.core.policy import Policy
from gpupack.extender.demand import RequestsCache, pod_key, pod_requests
from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.preemption import RANK_OTHER, victim_rank
from gpupack.extender.state import ClusterState, PodRecord, Requests

log = logging.getLogger(__name__)

BAD_OBJECT = (ValueError, TypeError, AttributeError, KeyError)
"""What reading a malformed object raises (DemandError is a ValueError): skipped, never fatal."""


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node to add or replace (`record`), or to forget (`record` None)."""

    name: str
    record: NodeRecord | None


@dataclass(frozen=True, slots=True)
class PodChange:
    """A pod counted on `node` with `requests`; uncounted when `node` is None (pending, finished, deleted)."""

    key: str
    node: str | None
    requests: Requests
    deleted: bool = False
    workload: bool = True
    """False for a DaemonSet's pod: every node runs one, so it neither makes a node "in use" nor a typical shape."""
    bound_at: str = ""
    """When the pod was bound (`bound_at`), to order a full list the way the GPUs were handed out."""
    rank: int = RANK_OTHER
    """What losing it costs, as a preemption victim (`extender.preemption.victim_rank`)."""
    priority: int = 0
    """Its `spec.priority`, which the preempt verb ranks victims by first."""
    started: float | None = None
    """Its `status.startTime` in seconds since the epoch (None: not started), for the work a preemption takes."""

    def record(self) -> PodRecord:
        """What the state keeps of the pod once counted on its node."""
        return PodRecord(self.node or "", self.requests, self.workload, self.rank, self.priority, self.started)


@dataclass(frozen=True, slots=True)
class SliceChange:
    """A ResourceSlice of NVIDIA's driver to add or replace (`published`), or to forget (`published` None)."""

    name: str
    published: DriverSlice | None


@dataclass(frozen=True, slots=True)
class ClaimChange:
    """A ResourceClaim's devices to count (`claim`), or a deleted claim to forget (`claim` None)."""

    key: str
    claim: ClaimDevices | None


Change = NodeChange | PodChange | SliceChange | ClaimChange


def node_change(event_type: str, node: dict[str, Any], policy: Policy) -> NodeChange:
    """The change a node event makes. Raises ValueError for a node without a name."""
    if event_type == "DELETED":
        name = (node.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("node without metadata.name")
        return NodeChange(name, None)
    record = node_from_json(node, policy)
    return NodeChange(record.name, record)


def bound_at(pod: dict[str, Any]) -> str:
    """When the API server recorded the pod as scheduled: its `PodScheduled` condition's lastTransitionTime
    (RFC 3339, to the second), else its creationTimestamp (a pod created with `nodeName` set has no such
    condition), else "".

    A full list comes in key order (namespace/name), not in the order the pods were bound, but the device plugin
    handed out each node's GPU shares in that order, so the extender replays the node's pods sorted by this.
    Timestamps of one format sort as strings; pods bound in the same second keep their list order.
    """
    status, meta = pod.get("status"), pod.get("metadata")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if (
            isinstance(condition, dict)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") == "True"
        ):
            when = condition.get("lastTransitionTime")
            if isinstance(when, str):
                return when
    created = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    return created if isinstance(created, str) else ""


def pod_change(
    event_type: str, pod: dict[str, Any], shared_resource: str, cache: RequestsCache | None = None
) -> PodChange:
    """The change a pod event makes: counted when bound and not finished (as `extender.demand` reads requests). Raises
    ValueError (DemandError) for a pod without a name or whose requests cannot be read."""
    meta = pod.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("pod without metadata.name")
    key = pod_key(meta)
    if event_type == "DELETED":
        return PodChange(key, None, (), deleted=True)
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or is_finished(pod):
        return PodChange(key, None, ())
    requests = (
        cache.requests(spec, shared_resource)
        if cache is not None
        else tuple(pod_requests(spec, shared_resource).items())
    )
    labels, annotations = meta.get("labels"), meta.get("annotations")
    rank = victim_rank(labels if isinstance(labels, dict) else {}, annotations if isinstance(annotations, dict) else {})
    # thousands of pods share a node: one string object per node name
    return PodChange(
        key,
        sys.intern(str(node)),
        requests,
        workload=not is_daemonset_pod(pod),
        bound_at=bound_at(pod),
        rank=rank,
        priority=priority_of(pod),
        started=started_at(pod),
    )


def reduce_event(
    kind: Kind, event: dict[str, Any], policy: Policy, cache: RequestsCache | None = None
) -> Change | None:
    """The change an ADDED, MODIFIED or DELETED event makes; None for a BOOKMARK or an unknown type.
    Raises ValueError, TypeError... for a malformed object (see BAD_OBJECT)."""
    event_type = event.get("type")
    if event_type not in ("ADDED", "MODIFIED", "DELETED"):
        return None
    obj = event["object"]
    if kind == "nodes":
        return node_change(event_type, obj, policy)
    if kind == "resourceslices":
        return slice_change(event_type, obj)
    if kind == "resourceclaims":
        return claim_change(event_type, obj)
    return pod_change(event_type, obj, policy.time_slicing.resource_name, cache)


def slice_change(event_type: str, obj: dict[str, Any]) -> SliceChange:
    """The change a ResourceSlice event makes; another driver's slice is forgotten (it holds no GPU of ours).
    Raises ValueError naming the slice and field for a malformed one."""
    published = None if event_type == "DELETED" else slice_from_json(obj)
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("ResourceSlice without metadata.name")
    return SliceChange(name, published)


def claim_change(event_type: str, obj: dict[str, Any]) -> ClaimChange:
    """The change a ResourceClaim event makes. Raises ValueError naming the claim and field for a malformed one."""
    if event_type == "DELETED":
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("ResourceClaim without metadata.name")
        return ClaimChange(f"{meta.get('namespace', '')}/{name}", None)
    claim = claim_from_json(obj)
    return ClaimChange(claim.key, claim)


def _log_unknown(key: str, unknown: list[tuple[str, str]]) -> None:
    if unknown:
        names = ", ".join(f"{pool}/{device}" for pool, device in unknown)
        log.warning("ResourceClaim %s holds devices no ResourceSlice publishes, not counted: %s", key, names)


def apply_changes(state: ClusterState, changes: Iterable[Change]) -> None:
    """Apply reduced changes in order. Call on the event loop only."""
    for change in changes:
        if isinstance(change, PodChange):
            if change.deleted:
                state.remove_pod(change.key)
            else:
                state.upsert_pod(
                    change.key,
                    change.node,
                    change.requests,
                    change.workload,
                    change.rank,
                    change.priority,
                    change.started,
                )
        elif isinstance(change, SliceChange):
            if change.published is None:
                state.remove_slice(change.name)
            else:
                state.upsert_slice(change.published)
        elif isinstance(change, ClaimChange):
            if change.claim is None:
                state.remove_claim(change.key)
            else:
                _log_unknown(change.key, state.upsert_claim(change.claim))
        elif change.record is None:
            state.remove_node(change.name)
        else:
            state.upsert_node(change.record)


def apply_events(
    state: ClusterState,
    kind: Kind,
    events: Iterable[dict[str, Any]],
    policy: Policy,
    cache: RequestsCache | None = None,
) -> int:
    """Reduce and apply raw watch events, as the informer does (minus the threads); malformed objects are
    skipped with a log line. Returns how many were skipped."""
    changes: list[Change] = []
    skipped = 0
    for event in events:
        try:
            change = reduce_event(kind, event, policy, cache)
        except BAD_OBJECT as exc:
            skipped += 1
            log.warning("skipping a malformed object: %s", exc, extra={"kind": kind})
            continue
        if change is not None:
            changes.append(change)
    apply_changes(state, changes)
    return skipped
