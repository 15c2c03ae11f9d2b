"""Each finding on the node, GPU or pod planted for it and on no other, from hand-made usage and cluster objects;
scale-down blockers one per Cluster Autoscaler reason; the summary in the guide's (docs/method.md) terms, worked out by
hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupack.report.build import build_report
from gpupack.report.document import Finding, iso
from gpupack.report.findings import all_findings
from gpupack.report.findings.sizing import resizes
from gpupack.report.prices import read_prices
from gpupack.report.usage import GpuUsage
from tests.report_cluster_kit import A100, MIG_RESOURCES, WEEK, gpu, gpus, inputs, node, pdb, pod, usage


def kinds(found: list[Finding]) -> dict[str, list[tuple[str | None, str | None, str | None, str | None]]]:
    out: dict[str, list[tuple[str | None, str | None, str | None, str | None]]] = {}
    for f in found:
        out.setdefault(f.kind, []).append((f.node, f.gpu, f.pod, f.workload))
    return out


def test_nodes_are_classed_by_the_guides_thresholds_and_each_class_found_on_its_node() -> None:
    found = usage(*gpus("idle", 2, 5.0), *gpus("under", 2, 20.0), *gpus("ok", 2, 50.0), *gpus("hot", 2, 90.0))
    report = build_report(inputs(found))
    assert {row.usage.node: row.node_class for row in report.nodes} == {
        "hot": "hot",
        "idle": "idle",
        "ok": "ok",
        "under": "underused",
    }
    assert kinds(list(report.findings)) == {
        "idle-node": [("idle", None, None, None)],
        "underused-node": [("under", None, None, None)],
        "hot-node": [("hot", None, None, None)],
    }


def test_the_boundaries_are_the_guides() -> None:
    found = usage(*gpus("ten", 1, 10.0), *gpus("thirty", 1, 30.0), *gpus("eighty-five", 1, 85.0))
    classes = {row.usage.node: row.node_class for row in build_report(inputs(found)).nodes}
    assert classes == {"ten": "underused", "thirty": "ok", "eighty-five": "ok"}  # under 10, under 30, over 85


def test_the_summary_speaks_the_guides_numbers() -> None:
    # 8 GPUs at 5 % and 8 at 35 %: mean 20 %; idle GPU-hours: 8 x 168 x 0.95 + 8 x 168 x 0.65 = 2150.4
    report = build_report(inputs(usage(*gpus("a", 8, 5.0), *gpus("b", 8, 35.0))))
    summary = report.summary
    assert summary.gpu_util_mean == pytest.approx(20.0) and (summary.gpus, summary.gpu_nodes) == (16, 2)
    assert (summary.nodes_idle, summary.nodes_underused, summary.nodes_hot) == (1, 1, 0)
    assert summary.idle_gpu_hours == pytest.approx(8 * 168 * 0.95 + 8 * 168 * 0.65)
    assert summary.idle_cost is None and "do not add GPUs; share, schedule and scale down first" in summary.advice


def test_prices_price_the_idle_hours_by_model_and_spot(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("currency: EUR\ngpus:\n  - {model: A100-SXM4-40GB, onDemand: 2.0, spot: 1.0}\n")
    objects = [node("a", 8), node("b", 8, spot=True)]
    report = build_report(inputs(usage(*gpus("a", 8, 50.0), *gpus("b", 8, 50.0)), objects, prices=read_prices(prices)))
    half = 8 * 168 * 0.5
    assert report.summary.idle_cost == pytest.approx(half * 2.0 + half * 1.0) and report.summary.currency == "EUR"
    assert report.summary.advice == ""


def test_light_kernels_are_gpus_busy_by_gpu_util_but_idle_by_engine() -> None:
    found = usage(gpu("n", 0, 91.0, engine_mean=15.6), gpu("n", 1, 91.0, engine_mean=80.0), gpu("n", 2, 60.0))
    assert kinds(all_findings(inputs(found)))["light-kernels"] == [("n", "0", None, None)]


def test_engine_activity_classes_the_nodes_when_asked() -> None:
    found = usage(*gpus("n", 2, 91.0, engine_mean=15.6))
    gpu_util = build_report(inputs(found)).nodes[0].node_class
    engine = build_report(inputs(type(found)(found.window, "t", found.gpus, metric="engine-active"))).nodes[0]
    assert (gpu_util, engine.node_class) == ("hot", "underused")


def test_memory_held_by_idle_compute_is_found_with_its_pods() -> None:
    found = usage(
        gpu("n", 0, 3.0, held_idle=0.8, fb_used_mean=36000.0, pods=frozenset({"ml/chat-7d9f8c-a"})),
        gpu("n", 1, 3.0, held_idle=0.3, fb_used_mean=36000.0),
    )
    objects = [node("n"), pod("chat-7d9f8c-a", "n", {"nvidia.com/gpu": "1"})]
    (finding,) = [f for f in all_findings(inputs(found, objects)) if f.kind == "memory-held-idle"]
    assert (finding.node, finding.gpu, finding.pod, finding.workload) == (
        "n",
        "0",
        "ml/chat-7d9f8c-a",
        "Deployment ml/chat",
    )
    assert finding.evidence["held_idle_fraction"] == 0.8


def test_a_mig_instance_near_its_memory_names_the_next_larger_profile() -> None:
    def instance(index: str, profile: str, used: float, total: float) -> GpuUsage:
        return GpuUsage("m", "0", A100, index, profile, engine_mean=40.0, fb_used_max=used, fb_total=total)

    found = usage(instance("1", "3g.20gb", 18_900.0, 20_000.0), instance("2", "3g.20gb", 10_000.0, 20_000.0))
    (finding,) = [f for f in all_findings(inputs(found)) if f.kind == "mig-near-oom"]
    assert (finding.node, finding.gpu) == ("m", "0/1")
    assert finding.evidence["next_profile"] == "7g.40gb" and "gpupack.io/gpu-memory to 40Gi" in finding.action


def test_the_largest_profile_near_its_memory_asks_for_a_whole_gpu() -> None:
    found = usage(GpuUsage("m", "0", A100, "0", "7g.40gb", engine_mean=50.0, fb_used_max=39_500.0, fb_total=40_000.0))
    (finding,) = [f for f in all_findings(inputs(found)) if f.kind == "mig-near-oom"]
    assert finding.evidence["next_profile"] is None and "whole GPU" in finding.action


def test_an_oversized_workload_gets_the_mig_profile_the_webhook_would_choose() -> None:
    """Two replicas holding whole GPUs at 12 % with 6 GB at most: 7.3 GiB with headroom, 8Gi asked; the webhook's
    sizing on the cluster's MIG offer picks the smallest profile with 8 GiB."""
    pods_on = [
        pod("embed-7d9f8c-a", "g", {"nvidia.com/gpu": "1"}),
        pod("embed-7d9f8c-b", "g", {"nvidia.com/gpu": "1"}),
        pod("llm-7d9f8c-a", "g", {"nvidia.com/gpu": "1"}),
    ]
    found = usage(
        gpu("g", 0, 12.0, fb_used_max=6000.0, pods=frozenset({"ml/embed-7d9f8c-a"})),
        gpu("g", 1, 10.0, fb_used_max=5000.0, pods=frozenset({"ml/embed-7d9f8c-b"})),
        gpu("g", 2, 70.0, fb_used_max=30000.0, pods=frozenset({"ml/llm-7d9f8c-a"})),
        gpu("m", 0, 40.0),
    )
    objects = [node("g", 3), node("m", 0, **MIG_RESOURCES), *pods_on]
    (finding,) = [f for f in all_findings(inputs(found, objects)) if f.kind == "oversized-workload"]
    assert finding.workload == "Deployment ml/embed" and finding.evidence["gpus"] == 2
    assert finding.evidence["suggested"] == "nvidia.com/mig-1g.10gb"
    assert "gpupack.io/workload=inference, gpupack.io/gpu-memory=8Gi" in finding.action


def test_an_oversized_workload_is_told_to_drop_its_whole_gpu_limit() -> None:
    # a GPU the pod names wins over the webhook's sizing (webhook.resources.apply_gpu): labels alone change nothing
    objects = [node("g", 1), node("m", 0, **MIG_RESOURCES), pod("embed-7d9f8c-a", "g", {"nvidia.com/gpu": "1"})]
    found = usage(gpu("g", 0, 12.0, fb_used_max=6000.0, pods=frozenset({"ml/embed-7d9f8c-a"})), gpu("m", 0, 40.0))
    (finding,) = [f for f in all_findings(inputs(found, objects)) if f.kind == "oversized-workload"]
    assert "drop its nvidia.com/gpu request and limit" in finding.action


def test_a_workload_no_mig_profile_holds_gets_a_time_sliced_replica_where_offered() -> None:
    # 30,000 MiB at most, 37Gi with headroom: more than the cluster's largest MIG profile (3g.20gb); the cluster
    # time-slices H100s (81,559 MiB each), so a latency-tolerant replica is the webhook's answer
    shared = node("h", 0, **{"nvidia.com/gpu.shared": "16"})
    shared["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81559"
    objects = [node("g", 1), node("m", 0, **MIG_RESOURCES), shared, pod("big-7d9f8c-a", "g", {"nvidia.com/gpu": "1"})]
    found = usage(gpu("g", 0, 12.0, fb_used_max=30_000.0, fb_total=80_000.0, pods=frozenset({"ml/big-7d9f8c-a"})))
    (resize,) = resizes(inputs(found, objects))
    assert resize.choice.resource == "nvidia.com/gpu.shared"
    assert resize.labels == {
        "gpupack.io/workload": "inference",
        "gpupack.io/gpu-memory": "37Gi",
        "gpupack.io/latency": "tolerant",
    }
    # time-sliced T4s (15,360 MiB) cannot hold it, and no time-sliced nodes at all neither: the action says what
    # to offer first
    shared["metadata"]["labels"]["nvidia.com/gpu.memory"] = "15360"
    for cluster in (objects, [o for o in objects if o is not shared]):
        (finding,) = [f for f in all_findings(inputs(found, cluster)) if f.kind == "oversized-workload"]
        assert finding.evidence["suggested"] == "nvidia.com/gpu" and "offer MIG or time-slicing" in finding.action


def test_without_pod_mapping_a_workload_alone_on_its_node_is_judged_by_the_node() -> None:
    objects = [node("g", 2), pod("embed-7d9f8c-a", "g", {"nvidia.com/gpu": "2"})]
    found = usage(*gpus("g", 2, 8.0, fb_used_max=3000.0))
    assert [f.workload for f in all_findings(inputs(found, objects)) if f.kind == "oversized-workload"] == [
        "Deployment ml/embed"
    ]
    shared = [*objects, pod("other-7d9f8c-a", "g", {"nvidia.com/gpu": "1"})]
    assert not [f for f in all_findings(inputs(found, shared)) if f.kind == "oversized-workload"]


def test_latency_critical_and_unlabelled_pods_on_time_sliced_gpus_are_found() -> None:
    shared = {"nvidia.com/gpu.shared": "1"}
    objects = [
        node("t", 0, **{"nvidia.com/gpu.shared": "16"}),
        pod("plain-7d9f8c-a", "t", shared),
        pod("critical-7d9f8c-a", "t", shared, labels={"gpupack.io/workload": "inference"}),
        pod(
            "tolerant-7d9f8c-a",
            "t",
            shared,
            labels={"gpupack.io/workload": "inference", "gpupack.io/latency": "tolerant"},
        ),
        pod("batch-7d9f8c-a", "t", shared, labels={"gpupack.io/workload": "batch"}),
        pod("thumbs-1", "t", shared, owner="Job"),  # unlabelled, but a job's: no latency to protect
        pod("notebook", "t", shared, owner=None),  # unlabelled and bare: nobody said it tolerates sharing
    ]
    found = kinds(all_findings(inputs(usage(gpu("t", 0, 50.0)), objects)))["shared-latency-critical"]
    assert sorted(p for _, _, p, _ in found) == ["ml/critical-7d9f8c-a", "ml/notebook", "ml/plain-7d9f8c-a"]


def test_inference_and_statefulset_pods_on_spot_are_found() -> None:
    objects = [
        node("spot", 4, spot=True),
        node("od", 4),
        pod("chat-7d9f8c-a", "spot", {"nvidia.com/gpu": "1"}, labels={"gpupack.io/workload": "inference"}),
        pod("db-0", "spot", owner="StatefulSet", owner_name="db"),
        pod("train-x", "spot", {"nvidia.com/gpu": "1"}, owner="Job", labels={"gpupack.io/workload": "training"}),
        pod("chat-7d9f8c-b", "od", {"nvidia.com/gpu": "1"}, labels={"gpupack.io/workload": "inference"}),
        pod("canary-7d9f8c-a", "spot", {"nvidia.com/gpu": "1"}),  # a Deployment's, unlabelled: serving
        pod("sweep-x", "spot", {"nvidia.com/gpu": "1"}, owner="Job"),  # a job's, unlabelled: spot is fine
    ]
    found = kinds(all_findings(inputs(usage(*gpus("spot", 4, 50.0), *gpus("od", 4, 50.0)), objects)))
    on_spot = sorted(p for _, _, p, _ in found["inference-on-spot"])
    assert on_spot == ["ml/canary-7d9f8c-a", "ml/chat-7d9f8c-a", "ml/db-0"]


TOLERANT = ("gpupack.io/latency", "tolerant")
BLOCKERS: list[tuple[str, dict[str, Any]]] = [
    ("NotSafeToEvictAnnotation", {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}),
    ("LocalStorageRequested", {"volumes": [{"name": "scratch", "emptyDir": {}}]}),
    ("LocalStorageRequested", {"volumes": [{"name": "data", "hostPath": {"path": "/data"}}]}),
    ("NotReplicated", {"owner": None}),
    ("UnmovableKubeSystemPod", {"namespace": "kube-system"}),
    ("NotEnoughPdb", {"labels": {"app": "guarded"}}),
    ("no-requests", {"requests": {}}),
]
MOVABLE: list[dict[str, Any]] = [
    {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}, "owner": None},
    {"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]},
    {
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "scratch"},
    },
    {"annotations": {"kubernetes.io/config.mirror": "x"}, "owner": None},
    {"owner": None, "priority": -100},  # below CA's expendable cutoff
    {"labels": {"app": "relaxed"}},  # a PDB that allows a disruption
    {"namespace": "kube-system", "labels": {"app": "dns"}},  # kube-system with a PDB allowing one
]


@pytest.mark.parametrize(("reason", "planted"), BLOCKERS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BLOCKERS)])
def test_each_autoscaler_blocker_is_named_by_cas_reason_on_the_pod_planted(
    reason: str, planted: dict[str, Any]
) -> None:
    objects = [
        node("idle"),
        pod("blocker-7d9f8c-a", "idle", **planted),
        pod("fine-7d9f8c-a", "idle"),
        pdb("guard", {"matchLabels": {"app": "guarded"}}, 0),
    ]
    found = [f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"]
    assert [(f.evidence["reason"], f.pod) for f in found] == [
        (reason, f"{planted.get('namespace', 'ml')}/blocker-7d9f8c-a")
    ]


@pytest.mark.parametrize("planted", MOVABLE)
def test_pods_cluster_autoscaler_moves_block_nothing(planted: dict[str, Any]) -> None:
    objects = [
        node("idle"),
        pod("mover-7d9f8c-a", "idle", **planted),
        pdb("relaxed", {"matchLabels": {"app": "relaxed"}}, 1),
        pdb("dns", {"matchLabels": {"app": "dns"}}, 1, namespace="kube-system"),
    ]
    found = [f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"]
    assert found == []


def test_a_node_annotated_against_scale_down_and_its_daemonsets_are_said() -> None:
    annotated = node("idle", annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})
    objects = [annotated, pod("dcgm-exporter-x", "idle", owner="DaemonSet", owner_name="dcgm-exporter")]
    found = [f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"]
    assert [(f.evidence["reason"], f.severity) for f in found] == [
        ("ScaleDownDisabledAnnotation", "medium"),
        ("DaemonSetUtilization", "info"),
    ]


# Karpenter's blockers, on a node a NodePool owns -------------------------------------------------------------------

KEEP = "karpenter.sh/do-not-disrupt"
WEEK_END = WEEK.end
"""The report judges `do-not-disrupt` durations at the window's end."""


def karpenter_node(name: str, **annotations: str) -> dict[str, Any]:
    found = node(name, annotations=dict(annotations))
    found["metadata"]["labels"]["karpenter.sh/nodepool"] = "h100"
    return found


def started_hours_before_the_end(hours: float) -> dict[str, Any]:
    return {"startTime": iso(WEEK_END - hours * 3600)}


KARPENTER_BLOCKERS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("DoNotDisruptAnnotation", {"annotations": {KEEP: "true"}}, {}),
    ("DoNotDisruptAnnotation", {"annotations": {KEEP: "2h"}}, started_hours_before_the_end(1)),  # not yet run 2 h
    ("DoNotDisruptAnnotation", {"annotations": {KEEP: "2h"}}, {}),  # no start time: protected
    ("PdbAllowsNoDisruption", {"labels": {"app": "guarded"}}, {}),
    ("MultiplePdbs", {"labels": {"app": "relaxed", "tier": "relaxed"}}, {}),
]
KARPENTER_MOVES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}, {}),  # not Karpenter's word
    ({"owner": None}, {}),  # Karpenter deletes a bare pod, it does not stop for it
    ({"volumes": [{"name": "scratch", "emptyDir": {}}]}, {}),
    ({"annotations": {KEEP: "2h"}}, started_hours_before_the_end(3)),  # its protection has run out
    ({"annotations": {KEEP: "forever"}}, {}),  # a value Karpenter ignores (with an Event)
    ({"labels": {"app": "relaxed"}}, {}),  # a PDB that allows a disruption
]


@pytest.mark.parametrize(
    ("reason", "planted", "status"),
    KARPENTER_BLOCKERS,
    ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(KARPENTER_BLOCKERS)],
)
def test_each_karpenter_blocker_is_named_on_the_pod_planted(
    reason: str, planted: dict[str, Any], status: dict[str, Any]
) -> None:
    blocker = pod("blocker-7d9f8c-a", "idle", **planted)
    blocker["status"].update(status)
    objects = [
        karpenter_node("idle"),
        blocker,
        pod("fine-7d9f8c-a", "idle"),
        pdb("guard", {"matchLabels": {"app": "guarded"}}, 0),
        pdb("relaxed", {"matchLabels": {"app": "relaxed"}}, 1),
        pdb("tiered", {"matchLabels": {"tier": "relaxed"}}, 1),
    ]
    found = [f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"]
    assert [(f.evidence["reason"], f.evidence["autoscaler"], f.pod) for f in found] == [
        (reason, "karpenter", "ml/blocker-7d9f8c-a")
    ]


@pytest.mark.parametrize(("planted", "status"), KARPENTER_MOVES)
def test_pods_karpenter_moves_block_nothing(planted: dict[str, Any], status: dict[str, Any]) -> None:
    mover = pod("mover-7d9f8c-a", "idle", **planted)
    mover["status"].update(status)
    objects = [karpenter_node("idle"), mover, pdb("relaxed", {"matchLabels": {"app": "relaxed"}}, 1)]
    found = [f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"]
    assert found == []


def test_a_node_karpenter_may_not_touch_and_karpenters_own_word_are_said() -> None:
    event = {
        "kind": "Event",
        "metadata": {"name": "idle.1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "idle"},
        "reason": "DisruptionBlocked",
        "message": 'Node is blocked through the "karpenter.sh/do-not-disrupt" annotation',
        "lastTimestamp": iso(WEEK_END - 60),
    }
    objects = [karpenter_node("idle", **{KEEP: "true"}), event]
    (found,) = [
        f for f in all_findings(inputs(usage(*gpus("idle", 8, 2.0)), objects)) if f.kind == "scale-down-blocker"
    ]
    assert found.evidence["reason"] == "NodeDoNotDisruptAnnotation"
    assert found.evidence["karpenter_event"] == (
        'DisruptionBlocked: Node is blocked through the "karpenter.sh/do-not-disrupt" annotation'
    )


@pytest.mark.parametrize(
    ("policy", "karpenters", "reasons"),
    [
        ("", False, ["NotSafeToEvictAnnotation"]),  # Cluster Autoscaler's node: CA's rule
        ("", True, []),  # Karpenter's node: Karpenter does not read safe-to-evict
        ("autoscalers: [karpenter]", False, ["NotManagedByKarpenter"]),  # no NodePool: nothing removes it
        ("autoscalers: [cluster-autoscaler]", True, []),  # Karpenter's node, but the policy speaks CA only
    ],
)
def test_each_node_is_judged_by_the_autoscaler_that_would_remove_it(
    policy: str, karpenters: bool, reasons: list[str]
) -> None:
    idle = karpenter_node("idle") if karpenters else node("idle")
    blocker = pod("blocker-7d9f8c-a", "idle", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    found = all_findings(inputs(usage(*gpus("idle", 8, 2.0)), [idle, blocker], policy=policy))
    assert [f.evidence["reason"] for f in found if f.kind == "scale-down-blocker"] == reasons


def test_busy_nodes_are_not_searched_for_blockers() -> None:
    objects = [node("busy"), pod("x-7d9f8c-a", "busy", owner=None)]
    assert not [
        f for f in all_findings(inputs(usage(*gpus("busy", 8, 60.0)), objects)) if f.kind == "scale-down-blocker"
    ]


def test_the_json_document_has_the_issues_fields() -> None:
    report = build_report(inputs(usage(*gpus("a", 2, 5.0), window=WEEK), [node("a", 2)]))
    doc = report.as_json()
    assert doc["window"] == {"start": "2026-11-18T11:06:40Z", "end": "2026-11-25T11:06:40Z"}
    assert set(doc["summary"]) >= {
        "gpu_util_mean",
        "gpus",
        "gpu_nodes",
        "nodes_idle",
        "nodes_underused",
        "idle_gpu_hours",
        "idle_cost",
    }
    assert set(doc["nodes"][0]) == {"node", "model", "gpus", "util_mean", "util_p95", "fb_used_fraction", "class"}
    assert set(doc["findings"][0]) == {"kind", "severity", "node", "gpu", "pod", "workload", "evidence", "action"}
    assert doc["compare"] is None


def test_a_node_without_utilization_is_unmeasured_and_says_how_to_measure_it() -> None:
    # nvidia-smi on GPUs in MIG mode: utilization [N/A], framebuffer read
    found = usage(gpu("m", 0, None, fb_used_mean=20_480.0), gpu("m", 1, None, fb_used_mean=0.0), gpu("a", 0, 50.0))
    unmeasured = [f for f in all_findings(inputs(found)) if f.kind == "unmeasured-node"]
    assert [(f.node, f.severity) for f in unmeasured] == [("m", "info")]
    assert unmeasured[0].evidence == {"gpus": 2, "fb_used_fraction": 0.25}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in unmeasured[0].action


def test_a_gpu_node_the_source_has_nothing_about_is_unmeasured() -> None:
    # `dark` runs no exporter (or is not scraped); `cpu` has no GPU resource and is no concern of the report.
    cpu = node("cpu", 0)
    del cpu["status"]["allocatable"]["nvidia.com/gpu"]
    objects = [node("seen", 2), node("dark", 4, **MIG_RESOURCES), cpu]
    found = [f for f in all_findings(inputs(usage(*gpus("seen", 2, 50.0)), objects)) if f.kind == "unmeasured-node"]
    assert [(f.node, f.severity) for f in found] == [("dark", "info")]
    assert found[0].evidence == {
        "gpu_resources": "nvidia.com/gpu=4, nvidia.com/mig-1g.10gb=2, nvidia.com/mig-1g.5gb=4, "
        "nvidia.com/mig-3g.20gb=2",
        "samples": 0,
    }
    assert "nothing from test names this GPU node" in found[0].action
