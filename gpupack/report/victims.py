"""The pods kube-scheduler preempted, from the Events it writes on each victim, and the workloads they belong to.
Pure: the Events are already read (`gpupack.report.cluster`).

kube-scheduler v1.36 (`pkg/scheduler/framework/preemption/executor.go`, `PreemptPod`) records, once a victim is
deleted (or, a pod still waiting in its memory, rejected), `Eventf(victim, preemptor, Normal, "Preempted",
"Preempting", "Preempted by pod <uid> on node <node>")` through the events.k8s.io recorder. Listed as core/v1,
the victim is `involvedObject`, the words `message` and the time `eventTime`; both forms are read here. A real
v1.36 kube-scheduler's Event carries no `related` object (tests/test_report_real.py lists one): the preemptor is
the pod whose uid the message names (older schedulers wrote `Preempted by <namespace>/<name> on node ...`, or set
`related`). An Event lasts the API server's `--event-ttl` (1 h by default): the Events name the victims of their
last hour or so, not of a week.

A victim is usually gone by the time the report runs. Its workload is, in this order: the victim's own pod (a
StatefulSet's replacement keeps its name); a live pod of the same controller, found by the `generateName` that
controller gives all its pods (a ReplicaSet's `<replicaset>-`, a Job's `<job>-`: the replacement it created);
else the name alone: `<prefix><5 random characters>` whose prefix ends in a pod-template-hash is a Deployment's
pod, any other generated name is `pods <namespace>/<prefix>*`, a name that is not generated is `pod ns/name`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpupack.core.objects import timestamp
from gpupack.report.cluster import Cluster, key, workload
from gpupack.report.usage import Window

PREEMPTED = "Preempted"
"""The reason of the Event kube-scheduler writes on each victim pod (v1.36 `executor.go`, `PreemptPod`)."""
RANDOM_CHARACTERS = "bcdfghjklmnpqrstvwxz2456789"
"""What a generated name's suffix is made of (k8s.io/apimachinery `util/rand`: `alphanums`)."""
SUFFIX_LENGTH = 5
"""The API server's generated suffix (k8s.io/apiserver `storage/names`: `randomLength`)..."""
MAX_PREFIX = 58
"""...after a prefix cut to 63 - 5 characters."""
HASH_CHARACTERS = "456789bcdf"
"""A pod-template-hash is a uint32's decimal digits, each mapped to `RANDOM_CHARACTERS[ord(d) % 27]`
(k8s.io/kubernetes `controller.ComputeHash` through `rand.SafeEncodeString`): these ten characters only."""
_GENERATED = re.compile(rf"(?P<prefix>.+)[{RANDOM_CHARACTERS}]{{{SUFFIX_LENGTH}}}")
_TEMPLATE_HASH = re.compile(rf"(?P<deployment>.+)-[{HASH_CHARACTERS}]{{6,10}}-")
"""A ReplicaSet's pod prefix `<deployment>-<hash>-`: six digits or more (a uint32 under 100,000 is 1 in 40,000)."""

FoundBy = Literal["pod", "sibling", "name"]


@dataclass(frozen=True, slots=True)
class Victim:
    """One pod kube-scheduler preempted in the window."""

    pod: str
    """`namespace/name` of the victim."""
    workload: str
    """`Kind namespace/name` of its controller (a ReplicaSet's as its Deployment), `pods namespace/prefix*` or
    `pod namespace/name` when the name is all that is left."""
    found_by: FoundBy
    """How the workload was found: the pod itself, a live pod of the same controller, or the name alone."""
    template: Mapping[str, Any] | None
    """The pod, or the live pod of its controller, whose spec and labels stand for the victim's; None by name."""
    node: str | None
    """The node it was preempted on (the Event's message)."""
    preemptor: str | None
    """`namespace/name` of the pod it made room for; None when that pod is gone (the message names its uid)."""
    preemptor_workload: str | None
    """Its workload, as the victims' are named; None when it is gone."""
    at: float
    """When, seconds since the epoch."""


def event_time(event: Mapping[str, Any]) -> float | None:
    """When the Event happened: `eventTime` (events.k8s.io writers), its series' last time, `lastTimestamp`,
    `firstTimestamp` (core/v1 writers), else when it was stored."""
    series = _reference(event, "series")
    meta = _reference(event, "metadata")
    for text in (
        event.get("eventTime"),
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("deprecatedLastTimestamp"),
        event.get("firstTimestamp"),
        meta.get("creationTimestamp"),
    ):
        if (found := timestamp(text)) is not None:
            return found
    return None


def _reference(event: Mapping[str, Any], *fields: str) -> Mapping[str, Any]:
    for name in fields:
        found = event.get(name)
        if isinstance(found, dict):
            return found
    return {}


_BY_UID = re.compile(r"Preempted by (?P<kind>pod|podgroup) (?P<uid>\S+) on node ")
_BY_NAME = re.compile(r"Preempted by (?P<namespace>[^\s/]+)/(?P<name>\S+) on node ")


def _node(message: str) -> str | None:
    """The node in `Preempted by pod <uid> on node <node>` (and the older `Preempted by ns/name on node ...`)."""
    found = re.search(r" on node (\S+?)\.?(?: \(|$)", message)
    return found.group(1) if found else None


class _Pods:
    """The cluster's pods by uid, by `namespace/name`, and by (namespace, generateName as a name keeps it)."""

    def __init__(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self.by_uid: dict[str, Mapping[str, Any]] = {}
        self.by_key: dict[str, Mapping[str, Any]] = {}
        self.by_prefix: dict[tuple[str, str], Mapping[str, Any]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            if uid := meta.get("uid"):
                self.by_uid[str(uid)] = pod
            self.by_key[key(pod)] = pod
            prefix = meta.get("generateName")
            if isinstance(prefix, str) and prefix and workload(pod) is not None:
                self.by_prefix.setdefault((str(meta.get("namespace") or ""), prefix[:MAX_PREFIX]), pod)

    def preemptor(self, event: Mapping[str, Any], message: str) -> tuple[str | None, str | None]:
        """`namespace/name` of the pod the victim made room for and its workload, from the message's uid (the pod
        still there), its `namespace/name`, or the Event's related object; (None, None) when none says."""
        if (by_uid := _BY_UID.match(message)) is not None:
            if by_uid.group("kind") == "podgroup":
                return None, f"PodGroup uid {by_uid.group('uid')}"
            pod = self.by_uid.get(by_uid.group("uid"))
            if pod is None:
                return None, None
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        elif (by_name := _BY_NAME.match(message)) is not None:
            namespace, name = by_name.group("namespace"), by_name.group("name")
        else:
            related = _reference(event, "related")
            if not related.get("name"):
                return None, None
            namespace, name = str(related.get("namespace") or ""), str(related["name"])
            if related.get("kind") != "Pod":
                return f"{namespace}/{name}", f"{related.get('kind') or 'object'} {namespace}/{name}"
        return f"{namespace}/{name}", self.find(namespace, name, None)[0]

    def find(self, namespace: str, name: str, uid: str | None) -> tuple[str, FoundBy, Mapping[str, Any] | None]:
        """The workload of the pod `namespace/name` and how it was found."""
        pod = self.by_uid.get(uid) if uid else None
        pod = pod or self.by_key.get(f"{namespace}/{name}")
        if pod is not None:
            return workload(pod) or f"pod {namespace}/{name}", "pod", pod
        generated = _GENERATED.fullmatch(name)
        if generated is None:
            return f"pod {namespace}/{name}", "name", None
        prefix = generated.group("prefix")
        sibling = self.by_prefix.get((namespace, prefix))
        if sibling is not None:
            return workload(sibling) or f"pods {namespace}/{prefix}*", "sibling", sibling
        if hashed := _TEMPLATE_HASH.fullmatch(prefix):
            return f"Deployment {namespace}/{hashed.group('deployment')}", "name", None
        return f"pods {namespace}/{prefix}*", "name", None


def preempted(cluster: Cluster, window: Window) -> list[Victim]:
    """The pods the cluster's `Preempted` Events name in [start, end) of `window`, each once (its first Event),
    oldest first. An Event about anything but a Pod, or without a time or a name, is skipped."""
    pods = _Pods(cluster.pods)
    seen: dict[str, Victim] = {}
    for event in sorted(cluster.events, key=lambda e: event_time(e) or 0.0):
        if event.get("reason") != PREEMPTED:
            continue
        victim = _reference(event, "involvedObject", "regarding")
        at = event_time(event)
        name, namespace = victim.get("name"), str(victim.get("namespace") or "")
        if victim.get("kind") != "Pod" or not name or at is None or not window.start <= at < window.end:
            continue
        uid = str(victim.get("uid") or "") or None
        identity = uid or f"{namespace}/{name}"
        if identity in seen:
            continue
        found, how, template = pods.find(namespace, str(name), uid)
        words = event.get("message") or event.get("note")  # core/v1, events.k8s.io/v1
        message = words if isinstance(words, str) else ""
        preemptor, preemptor_workload = pods.preemptor(event, message)
        seen[identity] = Victim(
            pod=f"{namespace}/{name}",
            workload=found,
            found_by=how,
            template=template,
            node=_node(message),
            preemptor=preemptor,
            preemptor_workload=preemptor_workload,
            at=at,
        )
    return list(seen.values())
