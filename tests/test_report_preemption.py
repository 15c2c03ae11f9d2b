"""`preemption-churn` from a hand-made cluster file and kube-scheduler numbers: the Preempted Events resolved to
the workloads that lost the pods, the finding's evidence worked out by hand, its severity at the thresholds, no
finding without either source, and the three renderers showing it. The numbers from a real Prometheus are
`tests/test_report_preemption_prometheus.py`'s."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpupack.cli import main
from gpupack.core.thresholds import Thresholds
from gpupack.report.build import build_report
from gpupack.report.churn import Churn, SchedulerChurn
from gpupack.report.cluster import from_objects, read_cluster_file
from gpupack.report.document import Finding, iso
from gpupack.report.findings import Inputs, all_findings
from gpupack.report.render_html import render_html
from gpupack.report.render_text import render
from gpupack.report.victims import preempted as victims_of
from tests.preemption_kit import GPU, churn_cluster, generated, preempted
from tests.report_cluster_kit import WEEK, gpus, inputs, node, pod, usage
from tests.test_report_cli import write_log

H = 3600.0
D = 86400.0
CHURN = Churn((SchedulerChurn("gpupack-scheduler", 5, 2, 4), SchedulerChurn("kube-scheduler", 15, 3, 12)))
"""What the planted Prometheus history gives for the week (`test_report_preemption_prometheus`)."""
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


def churn_finding(found: list[Finding]) -> Finding:
    (finding,) = [f for f in found if f.kind == "preemption-churn"]
    return finding


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


# -- the finding -----------------------------------------------------------------------------------------------


def test_the_finding_carries_the_schedulers_numbers_and_the_workloads_by_hand() -> None:
    found = inputs(usage(*gpus("n1", 8, 60.0)), churn_cluster(WEEK.start), churn=CHURN)
    finding = churn_finding(all_findings(found))
    # 16 victims in a week: 2.29 a day, under the 5 of `medium`
    assert (finding.severity, finding.workload, finding.node, finding.pod) == ("low", "Job ml/train", None, None)
    assert dict(finding.evidence) == {
        "victims": 16,
        "victims_per_day": 2.29,
        "attempts": 20,
        "preemptions": 5,
        "victims_per_attempt": 0.8,
        "victims_per_preemption": 3.2,
        "schedulers": "gpupack-scheduler: 4 victims, 2 preemptions, 5 attempts; "
        "kube-scheduler: 12 victims, 3 preemptions, 15 attempts",
        "event_victims": 8,
        "event_gpu_victims": 5,
        "events_from": "2026-11-18T12:06:40Z",
        "events_to": "2026-11-18T19:06:40Z",
        "top_workloads": "Job ml/train: 3 pods (3 on GPUs); Deployment ml/web: 2 pods (2 on GPUs); "
        "Deployment ml/old-api: 1 pod (0 on GPUs, 1 unknown); StatefulSet ml/db: 1 pod (0 on GPUs); "
        "pods ml/scratch-*: 1 pod (0 on GPUs, 1 unknown)",
        "preemptors": "Deployment ml/chat: 6; unknown: 2",
        "outranked_victims": 0,  # no pod has a start time: none was running then, so no other candidate is known
        "outranked": None,
    }
    action = finding.action
    assert action.startswith("move Job ml/train to a spot or checkpointing pool (gpupack.io/workload=training")
    assert 'set gpupack.io/checkpoint: "true" where the job checkpoints' in action
    assert "keep Deployment ml/web, Deployment ml/old-api, StatefulSet ml/db from being a victim" in action
    assert "raise its PriorityClass above its preemptors' (gpupack-inference)" in action
    assert "preemptVerb: preempt (manifests/extender/scheduler-config.yaml)" in action
    assert "kubectl get events" not in action  # the Events were there


def test_without_a_cluster_the_numbers_stand_alone_and_the_action_says_how_to_name_the_workloads() -> None:
    finding = churn_finding(all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn=CHURN)))
    assert finding.workload is None
    evidence = finding.evidence
    assert (evidence["victims"], evidence["event_victims"], evidence["top_workloads"]) == (16, None, None)
    assert "kubectl get events -A --field-selector reason=Preempted -o json" in finding.action
    assert "preemptVerb: preempt" in finding.action


def test_without_scheduler_metrics_the_events_alone_make_the_finding() -> None:
    finding = churn_finding(all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn_cluster(WEEK.start))))
    evidence = finding.evidence
    assert (evidence["victims"], evidence["attempts"], evidence["schedulers"]) == (None, None, None)
    assert (evidence["event_victims"], evidence["victims_per_day"]) == (8, round(8 / 7, 2))


def test_the_more_of_the_two_counts_decides_when_prometheus_sees_fewer_victims_than_the_events() -> None:
    few = Churn((SchedulerChurn("kube-scheduler", 3, 1, 1),))
    finding = churn_finding(all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn_cluster(WEEK.start), churn=few)))
    assert finding.evidence["victims"] == 1 and finding.evidence["victims_per_day"] == round(8 / 7, 2)


@pytest.mark.parametrize(
    "churn",
    [
        None,  # no scheduler metrics
        Churn((SchedulerChurn("kube-scheduler", 40, 0, 0),)),  # attempts that took nobody: pending pods, not churn
        Churn((SchedulerChurn("kube-scheduler", None, None, None),)),
    ],
)
def test_no_victim_anywhere_is_no_finding(churn: Churn | None) -> None:
    quiet = [o for o in churn_cluster(WEEK.start) if o["kind"] != "Event"]
    assert not [f for f in all_findings(inputs(usage(*gpus("n1", 8, 60.0)), quiet, churn=churn)) if "preempt" in f.kind]
    assert not [f for f in all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn=churn)) if "preempt" in f.kind]


@pytest.mark.parametrize(
    ("victims", "severity"),
    [(1, "low"), (34, "low"), (35, "medium"), (349, "medium"), (350, "high")],
)
def test_severity_follows_victims_per_day_at_the_thresholds(victims: int, severity: str) -> None:
    """5 a day is `medium`, 50 `high`: 35 and 350 in a week."""
    churn = Churn((SchedulerChurn("kube-scheduler", victims, victims, victims),))
    finding = churn_finding(all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn=churn)))
    assert finding.severity == severity


def test_the_thresholds_are_the_cores() -> None:
    churn = Churn((SchedulerChurn("kube-scheduler", 7, 7, 7),))
    strict = Thresholds(preemption_medium=0.5, preemption_high=1.0)
    finding = churn_finding(all_findings(inputs(usage(*gpus("n1", 8, 60.0)), churn=churn, thresholds=strict)))
    assert finding.severity == "high"


def test_checkpointing_jobs_and_cpu_pods_are_not_told_to_move_or_to_check_the_preempt_verb() -> None:
    sibling = generated(
        pod("ckpt-q2w4r", "n1", owner="Job", owner_name="ckpt", labels={"gpupack.io/checkpoint": "true"}), "ckpt-"
    )
    found = inputs(usage(*gpus("n1", 8, 60.0)), [sibling, preempted("ckpt-x7k2p", WEEK.start + H)])
    finding = churn_finding(all_findings(found))
    assert finding.evidence["top_workloads"] == "Job ml/ckpt: 1 pod (0 on GPUs)"
    assert "move" not in finding.action and "preemptVerb" not in finding.action
    assert finding.action.startswith("raise the victims' PriorityClass if they must stay")


# -- a victim that outranked another candidate (issue 27) -------------------------------------------------------

AT = WEEK.start + 2 * H
"""When the planted preemption happened."""


def started(pod_json: dict[str, Any], at: float) -> dict[str, Any]:
    pod_json["status"]["startTime"] = iso(at)
    return pod_json


def outranking_cluster(
    low: int = -100, low_started: float = AT - H, spot: bool = False, preemptor: str = "inference"
) -> list[dict[str, Any]]:
    """`a` full of a research team's Job pods at priority `low`, `b` of a training team's at 10000 but one, which
    kube-scheduler preempted at `AT` for a chat pod (priority 100000) now running in its place. No pod carries
    gpupack's class labels but the chat pod."""
    objects: list[dict[str, Any]] = [node("a", 8, spot=spot), node("b", 8)]
    for i in range(8):
        sweep = pod(f"sweep-{i}", "a", GPU, owner="Job", owner_name=f"sweep-{i}", priority=low)
        objects.append(started(generated(sweep, f"sweep-{i}-"), low_started))
    for i in range(7):
        train = pod(f"train-{'bcdfghj'[i]}2v4b", "b", GPU, owner="Job", owner_name="train", priority=10_000)
        objects.append(started(generated(train, "train-"), AT - 3 * H))
    chat = pod(
        "chat-59c4f7d6b8-m2n4p", "b", GPU, labels={"gpupack.io/workload": preemptor}, owner_name="chat-59c4f7d6b8",
        priority=100_000,
    )  # fmt: skip
    objects.append(started(generated(chat, "chat-59c4f7d6b8-"), AT + 30))
    objects.append(preempted("train-k5m2p", AT, on="b"))
    return objects


def test_a_victim_killed_while_a_lower_priority_candidate_existed_is_named() -> None:
    finding = churn_finding(all_findings(inputs(usage(*gpus("a", 8, 30.0)), outranking_cluster())))
    assert finding.evidence["outranked_victims"] == 1
    assert finding.evidence["outranked"] == (
        "ml/train-k5m2p (priority 10000) on b for ml/chat-59c4f7d6b8-m2n4p, while a offered victims of priority "
        "-100 at most (ml/sweep-7)"
    )
    assert finding.severity == "medium"  # one victim in a week is `low` by count; a reversed priority is not
    assert finding.action.startswith(
        "ml/train-k5m2p (priority 10000) died while a would have taken its preemptor with victims of priority -100"
    )
    assert "PodDisruptionBudget guards ml/sweep-7" in finding.action


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"low": 20_000}, "a's pods outrank the victim: kube-scheduler chose right"),
        ({"low_started": AT + 60}, "a's pods started after the preemption: nothing is known of a then"),
        ({"spot": True}, "a is spot: the verb refuses it for inference whatever dies there"),
    ],
)
def test_no_victim_is_named_without_a_lower_priority_candidate_the_data_shows(
    changes: dict[str, Any], why: str
) -> None:
    finding = churn_finding(all_findings(inputs(usage(*gpus("a", 8, 30.0)), outranking_cluster(**changes))))
    assert (finding.evidence["outranked_victims"], finding.evidence["outranked"]) == (0, None), why
    assert finding.severity == "low" and "died while" not in finding.action


# -- the renderers ---------------------------------------------------------------------------------------------


def _report(**kw: Any) -> Any:
    found: Inputs = inputs(usage(*gpus("n1", 8, 60.0)), churn_cluster(WEEK.start), churn=CHURN, **kw)
    return build_report(found)


def test_the_terminal_shows_the_finding_its_evidence_and_action() -> None:
    out = Console(record=True, width=1000, file=io.StringIO())
    render(_report(), out)
    text = out.export_text()
    assert "preemption-churn" in text and "workload Job ml/train" in text
    for item in ("victims=16", "attempts=20", "victims_per_attempt=0.8", "event_gpu_victims=5"):
        assert item in text
    assert "top_workloads=Job ml/train: 3 pods (3 on GPUs); Deployment ml/web: 2 pods" in text
    assert "move Job ml/train to a spot or checkpointing pool" in text


def test_the_json_document_holds_the_finding() -> None:
    document = json.loads(json.dumps(_report().as_json()))
    (item,) = [f for f in document["findings"] if f["kind"] == "preemption-churn"]
    assert (item["severity"], item["workload"], item["node"]) == ("low", "Job ml/train", None)
    assert item["evidence"]["victims_per_preemption"] == 3.2
    assert item["evidence"]["preemptors"] == "Deployment ml/chat: 6; unknown: 2"


def test_the_page_shows_the_finding_escaped() -> None:
    page = render_html(_report())
    findings = page.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert "preemption-churn" in findings and "Job ml/train" in findings
    assert "<li>victims=16</li>" in findings and "<li>schedulers=gpupack-scheduler: 4 victims" in findings
    assert "set gpupack.io/checkpoint: &quot;true&quot; where the job checkpoints" in findings


def test_the_command_reads_events_from_a_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nvidia-smi logs have no scheduler numbers: the cluster file's Events make the finding alone."""
    log = write_log(tmp_path / "n1.csv", 60, start=WEEK.start - 3600, days=2)
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": churn_cluster(WEEK.start)}))
    argv = ["report", "--nvidia-smi", f"n1={log}", "--cluster", str(cluster), "--json"]
    assert main([*argv, "--window", "1d", "--end", str(WEEK.start + D)]) == 0
    document = json.loads(capsys.readouterr().out)
    (item,) = [f for f in document["findings"] if f["kind"] == "preemption-churn"]
    # a day's window: 8 victims a day is `medium`
    assert (item["severity"], item["evidence"]["event_victims"], item["evidence"]["victims"]) == ("medium", 8, None)
