"""The pods kube-scheduler preempted, from a hand-made cluster file's Preempted Events, resolved to the workloads
that lost them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupack.report.cluster import from_objects, read_cluster_file
from gpupack.report.victims import preempted as victims_of
from tests.preemption_kit import churn_cluster, generated, preempted
from tests.report_cluster_kit import WEEK, pod

H = 3600.0
WORKLOADS = {
    "ml/web-6b7c8d9f4-h8t5w": ("Deployment ml/web", "sibling"),
    "ml/web-6b7c8d9f4-r4d7s": ("Deployment ml/web", "sibling"),
    "ml/train-k5m2p": ("Job ml/train", "sibling"),
    "ml/train-w9c4n": ("Job ml/train", "sibling"),
    "ml/train-p2r8v": ("Job ml/train", "sibling"),
    "ml/db-0": ("StatefulSet ml/db", "pod"),
    "ml/old-api-5f6d7c8b9-t6h2j": ("Deployment ml/old-api", "name"),
    "ml/scratch-x2v4b": ("pods ml/scratch-*", "name"),
}


# -- from Events to workloads ----------------------------------------------------------------------------------


def test_each_victim_resolves_to_its_workload_once_and_only_in_the_window() -> None:
    found = victims_of(from_objects(churn_cluster(WEEK.start)), WEEK)
    assert {v.pod: (v.workload, v.found_by) for v in found} == WORKLOADS
    assert [v.at for v in found] == sorted(v.at for v in found)  # oldest first
    assert found[0].at == WEEK.start + H and found[-1].at == WEEK.start + 8 * H
    by_pod = {v.pod: v for v in found}
    assert {v.pod: v.node for v in found} == {p: ("n2" if "train" in p or "db" in p else "n1") for p in WORKLOADS}
    # the finetune pod is gone: the message's uid finds nothing
    assert (by_pod["ml/train-w9c4n"].preemptor, by_pod["ml/train-w9c4n"].preemptor_workload) == (None, None)
    assert by_pod["ml/scratch-x2v4b"].preemptor == "ml/chat-59c4f7d6b8-m2n4p"  # the legacy message's name
    assert by_pod["ml/web-6b7c8d9f4-h8t5w"].preemptor == "ml/chat-59c4f7d6b8-m2n4p"  # the live pod of the uid
    assert {by_pod[p].preemptor_workload for p in WORKLOADS if "train-w" not in p and "train-p" not in p} == {
        "Deployment ml/chat"
    }


@pytest.mark.parametrize("form", ["core", "events"])
def test_a_related_object_names_the_preemptor_when_the_message_does_not(form: str) -> None:
    chat = churn_cluster(WEEK.start)[5]
    event = preempted("web-6b7c8d9f4-h8t5w", WEEK.start + H, form=form, related=True)
    (victim,) = victims_of(from_objects([chat, event]), WEEK)
    assert (victim.preemptor, victim.preemptor_workload, victim.node) == (
        "ml/chat-59c4f7d6b8-m2n4p",
        "Deployment ml/chat",
        "n1",
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web-6b7c8d9f4-h8t5w", "Deployment ml/web"),  # <deployment>-<pod-template-hash>-<5 random>
        ("api-5c8f47b9d6-x7k2p", "Deployment ml/api"),  # a 10-digit hash
        ("train-42-x7k2p", "pods ml/train-42-*"),  # 2 characters are not a hash: a Job's index
        ("web-6b7c8d9f4-abcde", "pod ml/web-6b7c8d9f4-abcde"),  # vowels: not a generated name
        ("db-0", "pod ml/db-0"),
        ("a" * 58 + "x7k2p", f"pods ml/{'a' * 58}*"),  # a prefix cut to 58 characters
    ],
)
def test_a_victim_that_left_nothing_behind_is_named_from_its_name(name: str, expected: str) -> None:
    (victim,) = victims_of(from_objects([preempted(name, WEEK.start + H)]), WEEK)
    assert (victim.workload, victim.found_by, victim.template) == (expected, "name", None)


def test_a_long_controller_name_finds_its_live_pod_by_the_cut_prefix() -> None:
    prefix = "b" * 60 + "-"
    sibling = generated(pod("b" * 58 + "q2w4r", "n1", owner="Job", owner_name="b" * 60), prefix)
    (victim,) = victims_of(from_objects([sibling, preempted("b" * 58 + "x7k2p", WEEK.start + H)]), WEEK)
    assert (victim.workload, victim.found_by) == (f"Job ml/{'b' * 60}", "sibling")


def test_a_victim_still_terminating_is_found_by_its_uid() -> None:
    labels = {"pod-template-hash": "6b7c8d9f4"}
    live = generated(pod("web-6b7c8d9f4-h8t5w", "n1", labels=labels, owner_name="web-6b7c8d9f4"), "web-6b7c8d9f4-")
    live["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    (victim,) = victims_of(from_objects([live, preempted("web-6b7c8d9f4-h8t5w", WEEK.start + H)]), WEEK)
    assert (victim.workload, victim.found_by, victim.template) == ("Deployment ml/web", "pod", live)


def test_the_event_file_reads_as_kubectl_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": churn_cluster(WEEK.start)}))
    cluster = read_cluster_file([path])
    assert len(cluster.events) == 12 and len(victims_of(cluster, WEEK)) == 8
    events_list = {"apiVersion": "v1", "kind": "EventList", "items": [preempted("x-x7k2p", WEEK.start + H)]}
    events_list["items"][0].pop("kind")  # list items carry no kind; the list's names it
    path.write_text(json.dumps(events_list))
    assert len(read_cluster_file([path]).events) == 1
