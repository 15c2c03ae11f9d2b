"""Preempted Events as kube-scheduler writes them and a cluster file's worth of them, with the pods left behind:
what `tests/test_report_preemption*.py` judge.

kube-scheduler v1.36 writes each Event through the events.k8s.io recorder (`executor.go`, `PreemptPod`):
`regarding` the victim, reason `Preempted`, action `Preempting`, note `Preempted by pod <uid> on node <node>`, an
`eventTime` in microseconds, no deprecated timestamps and, as a real one writes it (tests/test_report_real.py), no
`related` object. `kubectl get events -o json` shows it as core/v1: `involvedObject`, `message`,
`reportingComponent`, `firstTimestamp: null`, `source: {}`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.report_cluster_kit import node, pod


def micro(at: float) -> str:
    """An events.k8s.io MicroTime: RFC 3339 with microseconds."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def preempted(
    victim: str,
    at: float,
    on: str = "n1",
    by: str | None = "chat-59c4f7d6b8-m2n4p",
    namespace: str = "ml",
    uid: str | None = None,
    form: str = "core",
    related: bool = False,
) -> dict[str, Any]:
    """The Event kube-scheduler writes on `victim` at `at`, preempted by the pod `by` (its uid `uid-<by>`): as
    `kubectl get events` lists it (`core`), as `kubectl get events.events.k8s.io` does (`events`), or as a core/v1
    recorder wrote it before 1.19 (`legacy`: `lastTimestamp`, the preemptor's name in the message). `related`
    adds the preemptor as the Event's related object, with a message that names no pod."""
    regarding = {
        "kind": "Pod",
        "namespace": namespace,
        "name": victim,
        "uid": uid or f"uid-{victim}",
        "apiVersion": "v1",
    }
    meta = {"name": f"{victim}.18a{int(at)}", "namespace": namespace, "creationTimestamp": micro(at)[:19] + "Z"}
    words = f"Preempted by pod uid-{by} on node {on}"
    if form == "events":
        found: dict[str, Any] = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta}
        found |= {"eventTime": micro(at), "reason": "Preempted", "action": "Preempting", "note": words}
        found |= {"regarding": regarding, "reportingController": "default-scheduler", "type": "Normal"}
    else:
        found = {"apiVersion": "v1", "kind": "Event", "metadata": meta, "involvedObject": regarding}
        found |= {"reason": "Preempted", "type": "Normal", "source": {}, "firstTimestamp": None}
        if form == "legacy":
            found |= {"lastTimestamp": micro(at)[:19] + "Z", "message": f"Preempted by {namespace}/{by} on node {on}"}
            found |= {"source": {"component": "default-scheduler"}, "count": 1, "eventTime": None}
        else:
            found |= {"eventTime": micro(at), "message": words, "action": "Preempting", "lastTimestamp": None}
            found |= {"reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-cp-1"}
    if related and by is not None:
        found["related"] = {"kind": "Pod", "namespace": namespace, "name": by, "uid": f"uid-{by}"}
        found["message" if "message" in found else "note"] = f"Preempted by a pod on node {on}"
    return found


def generated(pod_json: dict[str, Any], prefix: str, uid: str | None = None) -> dict[str, Any]:
    """The pod with the `generateName` its controller gave it, and a uid."""
    pod_json["metadata"]["generateName"] = prefix
    pod_json["metadata"]["uid"] = uid or f"uid-{pod_json['metadata']['name']}"
    return pod_json


GPU = {"nvidia.com/gpu": "1"}
MIG = {"nvidia.com/mig-1g.10gb": "1"}


def churn_cluster(start: float) -> list[dict[str, Any]]:
    """Eight pods preempted from `start` + 1 h on, the pods still there, and Events that must not count.

    | victim                    | gone? | found by | workload              | GPU     |
    | web-6b7c8d9f4-h8t5w, -r4d7s | yes | a live pod of its ReplicaSet | Deployment ml/web | yes |
    | train-k5m2p, -w9c4n, -p2r8v | yes | the Job's live pod  | Job ml/train (training) | yes |
    | db-0                      | replaced | its name       | StatefulSet ml/db     | no      |
    | old-api-5f6d7c8b9-t6h2j   | yes   | its name (hash)  | Deployment ml/old-api | unknown |
    | scratch-x2v4b             | yes   | its name         | pods ml/scratch-*     | unknown |

    Six were preempted by Deployment ml/chat's pod, two by a finetune Job's pod that is gone (its uid is all the
    Events say of it).
    """
    h = 3600.0
    web = {"pod-template-hash": "6b7c8d9f4"}
    objects: list[dict[str, Any]] = [node("n1", 8, **MIG), node("n2", 8)]
    objects += [
        generated(pod("web-6b7c8d9f4-zq2xk", "n1", GPU, labels=web, owner_name="web-6b7c8d9f4"), "web-6b7c8d9f4-"),
        generated(
            pod("train-7x9bq", "n2", GPU, owner="Job", owner_name="train", labels={"gpupack.io/workload": "training"}),
            "train-",
        ),
        generated(pod("db-0", "n2", owner="StatefulSet", owner_name="db"), "db-", uid="uid-db-0-new"),
        generated(
            pod(
                "chat-59c4f7d6b8-m2n4p",
                "n1",
                MIG,
                labels={"pod-template-hash": "59c4f7d6b8", "gpupack.io/workload": "inference"},
                owner_name="chat-59c4f7d6b8",
            ),
            "chat-59c4f7d6b8-",
        ),
    ]
    objects += [
        preempted("web-6b7c8d9f4-h8t5w", start + 1 * h),
        preempted("web-6b7c8d9f4-r4d7s", start + 2 * h),
        preempted("train-k5m2p", start + 3 * h, on="n2"),
        preempted("train-k5m2p", start + 3 * h + 1, on="n2"),  # the same victim twice: once
        preempted("train-w9c4n", start + 4 * h, on="n2", by="finetune-b7x2k"),
        preempted("train-p2r8v", start + 5 * h, on="n2", by="finetune-b7x2k"),
        preempted("db-0", start + 6 * h, on="n2", uid="uid-db-0-old"),
        preempted("old-api-5f6d7c8b9-t6h2j", start + 7 * h, form="events"),
        preempted("scratch-x2v4b", start + 8 * h, form="legacy"),
        preempted("web-6b7c8d9f4-b2c4d", start - 60),  # before the window
        {**preempted("nightly", start + 9 * h), "involvedObject": {"kind": "Workload", "name": "nightly"}},  # Kueue
        {**preempted("web-6b7c8d9f4-zq2xk", start + 9 * h), "reason": "Scheduled"},
    ]
    return objects
