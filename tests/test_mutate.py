"""The admission decision, case by case: sizing, placement, priority, conflicts, refusals, audit mode."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from gpupack.core.cluster import PriorityClassInfo, facts
from gpupack.webhook.mutate import InvalidObject, plan
from tests.conftest import W, context, make_pod


def mutated(pod: dict[str, Any], doc: str = "", **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    decision = plan(pod, pod["metadata"].get("namespace"), context(doc, **kwargs))
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(pod, decision.ops), decision.warnings


def gpu_of(pod: dict[str, Any], index: int = 0) -> dict[str, str]:
    resources = pod["spec"]["containers"][index].get("resources", {})
    return {k: v for k, v in resources.get("limits", {}).items() if k.startswith("nvidia.com/")}


A100_40_MIXED = frozenset({"nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb"})
SPOT_LABELS = [
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
    ("node-type", "spot"),
]
"""Every label the default policy recognises on spot nodes, in the order the webhook writes them: Karpenter's
first (Karpenter tries a pod's required terms in order), the clouds', then the cluster's own."""
NEVER_SPOT = [{"key": k, "operator": "NotIn", "values": [v]} for k, v in SPOT_LABELS]
SPOT_TOLERATIONS = [
    {"key": "node-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
]


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


@pytest.mark.parametrize(
    ("labels", "advertised", "expected"),
    [
        ({"gpu-memory": "8Gi"}, None, {"nvidia.com/mig-1g.10gb": "1"}),
        ({"gpu-memory": "5Gi"}, None, {"nvidia.com/mig-1g.5gb": "1"}),
        ({"gpu-memory": "16Gi"}, None, {"nvidia.com/mig-1g.18gb": "1"}),
        ({"gpu-memory": "40Gi"}, None, {"nvidia.com/mig-3g.40gb": "1"}),
        ({"gpu-memory": "8Gi"}, A100_40_MIXED, {"nvidia.com/mig-2g.10gb": "1"}),
        ({"gpu-memory": "12Gi"}, A100_40_MIXED, {"nvidia.com/mig-3g.20gb": "1"}),
        ({"gpu-memory": "200Gi"}, None, {"nvidia.com/gpu": "1"}),
        ({"gpu-memory": "21Gi"}, A100_40_MIXED, {"nvidia.com/gpu": "1"}),
        ({}, None, {"nvidia.com/mig-1g.10gb": "1"}),
        ({"latency": "tolerant"}, None, {"nvidia.com/gpu.shared": "1"}),
        ({"sharing": "exclusive"}, None, {"nvidia.com/gpu": "1"}),
        ({"gpus": "2"}, None, {"nvidia.com/gpu": "2"}),
        ({"gpu-memory": "8Gi"}, frozenset({"nvidia.com/gpu"}), {"nvidia.com/gpu": "1"}),
    ],
)
def test_inference_gets_the_smallest_fitting_gpu(
    labels: dict[str, str], advertised: frozenset[str] | None, expected: dict[str, str]
) -> None:
    pod = make_pod({W + "workload": "inference", **{W + k: v for k, v in labels.items()}})
    after, _ = mutated(pod, facts=facts(None, advertised))
    assert gpu_of(after) == expected
    requests = after["spec"]["containers"][0]["resources"]["requests"]
    assert {k: v for k, v in requests.items() if k.startswith("nvidia.com/")} == expected


def test_inference_without_gpu_memory_warns_how_to_set_it() -> None:
    _, warnings = mutated(make_pod({W + "workload": "inference"}))
    assert any("no gpupack.io/gpu-memory label" in w and "gpupack.io/gpu-memory=8Gi" in w for w in warnings)


def test_model_larger_than_every_profile_gets_a_whole_gpu_with_a_warning() -> None:
    _, warnings = mutated(make_pod({W + "workload": "inference", W + "gpu-memory": "200Gi"}))
    assert any("exceeds the largest MIG profile" in w for w in warnings)


def test_profiles_of_equal_memory_prefer_fewer_compute_slices() -> None:
    # 1g.10gb and 2g.10gb both have 10 GB: the 1-slice profile wins.
    after, _ = mutated(make_pod({W + "workload": "inference", W + "gpu-memory": "9Gi"}))
    assert gpu_of(after) == {"nvidia.com/mig-1g.10gb": "1"}


def test_inference_is_kept_off_spot_and_gets_priority_from_the_policy() -> None:
    after, _ = mutated(make_pod({W + "workload": "inference"}))
    spec = after["spec"]
    assert required_terms(after) == [{"matchExpressions": NEVER_SPOT}]  # one term: no spot label of any kind
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "gpupack-inference",
        100000,
        "PreemptLowerPriority",
    )


def test_existing_required_terms_each_get_the_spot_exclusion() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    after, _ = mutated(make_pod({W + "workload": "inference"}, affinity=affinity))
    new_terms = required_terms(after)
    assert new_terms[0]["matchExpressions"] == [*terms[0]["matchExpressions"], *NEVER_SPOT]
    assert new_terms[1]["matchExpressions"] == NEVER_SPOT
    assert new_terms[1]["matchFields"] == terms[1]["matchFields"]


def test_training_that_checkpoints_prefers_spot_tolerates_it_and_may_be_evicted() -> None:
    after, _ = mutated(make_pod({W + "workload": "training", W + "gpus": "4", W + "checkpoint": "true"}))
    spec = after["spec"]
    assert gpu_of(after) == {"nvidia.com/gpu": "4"}
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [
        {"weight": 80, "preference": {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}}
        for k, v in SPOT_LABELS
    ]
    assert all(t in spec["tolerations"] for t in SPOT_TOLERATIONS)
    assert "cluster-autoscaler.kubernetes.io/safe-to-evict" not in after["metadata"]["annotations"]
    assert "karpenter.sh/do-not-disrupt" not in after["metadata"]["annotations"]


def test_training_that_does_not_checkpoint_stays_off_spot_and_is_not_evicted() -> None:
    """ "Spot when it checkpoints": an interruption costs a job that cannot resume all its work so far, so the
    class's spot preference needs the label; without it the pod is kept off spot as inference is."""
    after, warnings = mutated(make_pod({W + "workload": "training", W + "gpus": "4"}))
    spec = after["spec"]
    assert gpu_of(after) == {"nvidia.com/gpu": "4"}
    assert required_terms(after) == [{"matchExpressions": NEVER_SPOT}]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["nodeAffinity"]
    assert not any(t in spec.get("tolerations", []) for t in SPOT_TOLERATIONS)
    assert "gpupack: kept off spot (it would lose its work): gpupack.io/checkpoint=true if it resumes" in warnings
    annotations = after["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert annotations["karpenter.sh/do-not-disrupt"] == "true"
    # an admin who wants every training pod on spot says so
    after, _ = mutated(
        make_pod({W + "workload": "training"}), "classes:\n  training:\n    spotNeedsCheckpoint: false\n"
    )
    assert "preferredDuringSchedulingIgnoredDuringExecution" in after["spec"]["affinity"]["nodeAffinity"]


def test_batch_requires_spot_and_gets_the_low_priority_class() -> None:
    after, _ = mutated(make_pod({W + "workload": "batch"}))
    spec = after["spec"]
    # any spot label will do, so one required term per label (terms are ORed), Karpenter's first
    assert required_terms(after) == [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in SPOT_LABELS
    ]
    assert "nodeSelector" not in spec and all(t in spec["tolerations"] for t in SPOT_TOLERATIONS)
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("gpupack-batch", -100, "Never")
    assert gpu_of(after) == {"nvidia.com/gpu.shared": "1"}


def test_statefulset_pod_never_goes_to_spot_even_in_a_spot_class() -> None:
    after, _ = mutated(make_pod({W + "workload": "batch"}, owner="StatefulSet"))
    assert "nodeSelector" not in after["spec"]
    assert required_terms(after) == [{"matchExpressions": NEVER_SPOT}]


def test_every_container_gets_cpu_and_memory_requests_capped_by_limits() -> None:
    containers = [
        {"name": "main", "image": "i"},
        {"name": "side", "image": "i", "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m"}}},
    ]
    init = [{"name": "init", "image": "i"}, {"name": "proxy", "image": "i", "restartPolicy": "Always"}]
    after, _ = mutated(make_pod({W + "workload": "inference"}, containers=containers, initContainers=init))
    spec = after["spec"]
    assert spec["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert spec["containers"][1]["resources"]["requests"] == {"cpu": "100m", "memory": "512Mi"}
    assert "resources" not in spec["initContainers"][0]  # a plain init container is left alone
    assert spec["initContainers"][1]["resources"]["requests"] == {"cpu": "1", "memory": "4Gi"}
    assert gpu_of(after, 1) == {}


def test_gpu_goes_to_the_container_named_by_annotation() -> None:
    containers = [{"name": "proxy", "image": "i"}, {"name": "model", "image": "i"}]
    pod = make_pod({W + "workload": "inference"}, {W + "container": "model"}, containers=containers)
    after, _ = mutated(pod)
    assert gpu_of(after, 0) == {}
    assert gpu_of(after, 1) == {"nvidia.com/mig-1g.10gb": "1"}


def test_gpu_stays_with_the_container_that_already_asks_for_one() -> None:
    containers = [
        {"name": "proxy", "image": "i"},
        {"name": "model", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
    ]
    after, _ = mutated(make_pod({W + "workload": "training"}, containers=containers))
    assert gpu_of(after, 0) == {}


def test_explicit_gpu_in_the_pod_wins_with_a_conflict_warning() -> None:
    resources = {"limits": {"nvidia.com/mig-3g.20gb": "1"}, "requests": {"nvidia.com/mig-3g.20gb": "1"}}
    pod = make_pod(
        {W + "workload": "inference", W + "gpu-memory": "8Gi"},
        containers=[{"name": "m", "image": "i", "resources": resources}],
    )
    after, warnings = mutated(pod)
    assert gpu_of(after) == {"nvidia.com/mig-3g.20gb": "1"}
    assert any("kept the pod's nvidia.com/mig-3g.20gb=1" in w for w in warnings)


def test_enforced_gpu_replaces_what_the_pod_wrote() -> None:
    resources = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    pod = make_pod(
        {W + "workload": "inference", W + "gpu-memory": "8Gi"},
        containers=[{"name": "m", "image": "i", "resources": resources}],
    )
    after, warnings = mutated(pod, "enforce: [gpu]")
    assert gpu_of(after) == {"nvidia.com/mig-1g.10gb": "1"}
    assert "nvidia.com/gpu" not in after["spec"]["containers"][0]["resources"]["requests"]
    assert any("enforces the GPU resource" in w for w in warnings)


def test_pod_priority_class_wins_unless_enforced() -> None:
    pod = make_pod({W + "workload": "inference"}, priorityClassName="mine", priority=5)
    after, warnings = mutated(pod)
    assert (after["spec"]["priorityClassName"], after["spec"]["priority"]) == ("mine", 5)
    assert any("kept priorityClassName mine" in w for w in warnings)
    after, _ = mutated(pod, "enforce: [priority]")
    assert (after["spec"]["priorityClassName"], after["spec"]["priority"]) == ("gpupack-inference", 100000)


def test_priority_values_come_from_the_api_when_it_was_read() -> None:
    api = facts({"gpupack-inference": PriorityClassInfo(777, "Never")}, None)
    after, _ = mutated(make_pod({W + "workload": "inference"}), facts=api)
    assert (after["spec"]["priority"], after["spec"]["preemptionPolicy"]) == (777, "Never")


def test_priority_class_missing_everywhere_is_left_out_with_a_warning() -> None:
    doc = "classes: {inference: {priorityClassName: nowhere}}"
    after, warnings = mutated(make_pod({W + "workload": "inference"}), doc)
    assert "priorityClassName" not in after["spec"] and after["spec"]["priority"] == 0
    assert any("PriorityClass nowhere not found" in w for w in warnings)


def test_pod_that_selects_spot_keeps_it_unless_spot_is_enforced() -> None:
    pod = make_pod({W + "workload": "inference"}, nodeSelector={"node-type": "spot"})
    after, warnings = mutated(pod)
    assert after["spec"]["nodeSelector"] == {"node-type": "spot"} and "affinity" not in after["spec"]
    assert any("selects spot nodes, kept" in w for w in warnings)
    after, _ = mutated(pod, "enforce: [spot]")
    assert after["spec"]["nodeSelector"] == {}
    assert "requiredDuringSchedulingIgnoredDuringExecution" in after["spec"]["affinity"]["nodeAffinity"]


@pytest.mark.parametrize(
    ("selector", "kept"),
    [
        ({"karpenter.sh/capacity-type": "spot"}, True),  # Karpenter's own spot label: a choice of spot
        ({"eks.amazonaws.com/capacityType": "SPOT"}, True),
        ({"karpenter.sh/capacity-type": "on-demand"}, False),  # says "not spot": the exclusion adds nothing wrong
    ],
)
def test_a_pod_selecting_capacity_by_a_well_known_label_is_read_as_its_choice(
    selector: dict[str, str], kept: bool
) -> None:
    pod = make_pod({W + "workload": "inference"}, nodeSelector=selector)
    after, warnings = mutated(pod)
    assert after["spec"]["nodeSelector"] == selector
    assert "affinity" not in after["spec"]  # its own choice stands either way: no affinity added
    assert any("selects spot nodes, kept" in w for w in warnings) == kept


def test_a_pod_requiring_spot_by_affinity_loses_those_terms_when_spot_is_enforced() -> None:
    terms = [
        {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]},
        {"matchExpressions": [{"key": "node-type", "operator": "In", "values": ["spot"]}]},
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    pod = make_pod({W + "workload": "inference"}, affinity=affinity)
    after, _ = mutated(pod)
    assert required_terms(after) == terms  # kept, with a warning
    after, _ = mutated(pod, "enforce: [spot]")
    assert required_terms(after) == [{"matchExpressions": NEVER_SPOT}]


def test_enforced_spot_replaces_a_batch_pods_own_exclusion_of_spot() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    never = {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [zone, never]}]}}}  # fmt: skip
    pod = make_pod({W + "workload": "batch"}, nodeSelector={"node-type": "on-demand"}, affinity=affinity)
    after, warnings = mutated(pod)
    assert after["spec"]["nodeSelector"] == {"node-type": "on-demand"} and required_terms(after) == [
        {"matchExpressions": [zone, never]}
    ]
    assert any("excludes spot nodes, kept" in w for w in warnings)
    after, _ = mutated(pod, "enforce: [spot]")
    assert after["spec"]["nodeSelector"] == {}  # its zone stays, its exclusions go, any spot label will do
    assert required_terms(after) == [
        {"matchExpressions": [zone, {"key": k, "operator": "In", "values": [v]}]} for k, v in SPOT_LABELS
    ]


def test_batch_with_its_own_required_terms_gets_each_combined_with_every_spot_label() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [zone]}]}}}  # fmt: skip
    after, _ = mutated(make_pod({W + "workload": "batch"}, affinity=affinity))
    assert required_terms(after) == [
        {"matchExpressions": [zone, {"key": k, "operator": "In", "values": [v]}]} for k, v in SPOT_LABELS
    ]


def test_the_webhook_run_twice_changes_nothing_more() -> None:
    # kube-apiserver may call a webhook again (reinvocationPolicy): each placement must read its own output
    for workload in ("inference", "training", "batch"):
        once, _ = mutated(make_pod({W + "workload": workload}))
        twice, _ = mutated(once)
        assert twice == once, workload


@pytest.mark.parametrize(
    ("doc", "labels"),
    [
        ("spot: {wellKnown: false}", [("node-type", "spot")]),
        (
            "spot: {wellKnown: false, labels: [{key: pool, value: cheap}, {key: pool, value: spare}]}",
            [("pool", "cheap|spare")],
        ),
        ("spot: {labels: []}", SPOT_LABELS[:-1]),
    ],
)
def test_the_policy_names_the_spot_labels(doc: str, labels: list[tuple[str, str]]) -> None:
    after, _ = mutated(make_pod({W + "workload": "inference"}), doc)
    assert required_terms(after) == [
        {"matchExpressions": [{"key": k, "operator": "NotIn", "values": v.split("|")} for k, v in labels]}
    ]


def test_without_well_known_spot_labels_only_the_clusters_own_taint_is_tolerated() -> None:
    after, _ = mutated(make_pod({W + "workload": "batch"}), "spot: {wellKnown: false, taints: []}")
    assert not [t for t in after["spec"].get("tolerations", []) if t.get("operator") == "Equal"]


@pytest.mark.parametrize(
    ("labels", "doc", "keys"),
    [
        ({"workload": "inference", "gpu-memory": "5Gi"}, "", ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb"]),
        ({"workload": "batch"}, "", ["nvidia.com/gpu", "nvidia.com/gpu.shared"]),
        ({"workload": "training"}, "", ["nvidia.com/gpu"]),
        ({"workload": "training"}, "tolerateGpuTaints: false", []),
    ],
)
def test_gpu_pods_tolerate_the_taints_of_pools_kept_for_gpu_pods(
    labels: dict[str, str], doc: str, keys: list[str]
) -> None:
    # ExtendedResourceToleration ran before the webhook on a pod that asked for no GPU: gpupack adds what it would
    # have for the GPU it gives, and GKE's nvidia.com/gpu key
    after, _ = mutated(make_pod({W + k: v for k, v in labels.items()}), doc)
    found = [t for t in after["spec"].get("tolerations", []) if t.get("effect") == "NoSchedule"]
    assert [t for t in found if t.get("operator") == "Exists"] == [
        {"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in keys
    ]


def test_a_pod_that_tolerates_everything_gets_no_gpu_toleration() -> None:
    after, _ = mutated(make_pod({W + "workload": "training"}, tolerations=[{"operator": "Exists"}]))
    assert after["spec"]["tolerations"] == [{"operator": "Exists"}]


# the node autoscalers' annotations -----------------------------------------------------------------------------

SAFE = "cluster-autoscaler.kubernetes.io/safe-to-evict"
KEEP = "karpenter.sh/do-not-disrupt"


@pytest.mark.parametrize(
    ("doc", "written"),
    [
        ("", {SAFE: "false", KEEP: "true"}),
        ("autoscalers: [karpenter]", {KEEP: "true"}),
        ("autoscalers: [cluster-autoscaler]", {SAFE: "false"}),
        ("autoscalers: []", {}),
        ("classes: {training: {safeToEvict: true}}", {}),
    ],
)
def test_training_without_checkpoints_is_kept_from_each_autoscaler_the_policy_names(
    doc: str, written: dict[str, str]
) -> None:
    after, _ = mutated(make_pod({W + "workload": "training"}), doc)
    found = after["metadata"].get("annotations") or {}
    assert {k: v for k, v in found.items() if k in (SAFE, KEEP)} == written


@pytest.mark.parametrize(
    ("own", "after_own", "conflict"),
    [
        ({KEEP: "30m"}, {KEEP: "30m", SAFE: "false"}, False),  # its own duration stands; CA still told
        ({KEEP: "true"}, {KEEP: "true", SAFE: "false"}, False),
        ({SAFE: "false"}, {SAFE: "false", KEEP: "true"}, False),
        ({SAFE: "true"}, {SAFE: "true"}, True),  # it says it may be evicted: no do-not-disrupt for Karpenter either
        ({KEEP: "false"}, {KEEP: "false"}, True),  # not a value Karpenter honours: it asks for nothing
    ],
)
def test_a_pods_own_autoscaler_annotation_keeps_its_value(
    own: dict[str, str], after_own: dict[str, str], conflict: bool
) -> None:
    after, warnings = mutated(make_pod({W + "workload": "training"}, annotations=own))
    found = after["metadata"].get("annotations") or {}
    assert {k: v for k, v in found.items() if k in (SAFE, KEEP)} == after_own
    assert any("kept" in w and "from the pod" in w for w in warnings) == conflict


def test_enforced_autoscaler_annotations_overrule_the_pods_own() -> None:
    after, _ = mutated(make_pod({W + "workload": "training"}, annotations={SAFE: "true", KEEP: "5m"}),
                       "enforce: [autoscaler]")  # fmt: skip
    assert {k: after["metadata"]["annotations"][k] for k in (SAFE, KEEP)} == {SAFE: "false", KEEP: "true"}


@pytest.mark.parametrize(
    ("labels", "annotations", "named", "valid"),
    [
        ({"workload": "serving"}, None, "gpupack.io/workload", "inference | training | batch"),
        ({"workload": "inference", "gpu-memory": "lots"}, None, "gpupack.io/gpu-memory", "8Gi"),
        ({"workload": "inference", "gpu-memory": "0"}, None, "gpupack.io/gpu-memory", "positive"),
        ({"workload": "training", "gpus": "-1"}, None, "gpupack.io/gpus", "1 to 64"),
        ({"workload": "training", "gpus": "two"}, None, "gpupack.io/gpus", "1 to 64"),
        ({"workload": "inference", "latency": "fast"}, None, "gpupack.io/latency", "critical | tolerant"),
        ({"workload": "inference", "sharing": "mps"}, None, "gpupack.io/sharing", "mig | time-slicing | exclusive"),
        ({"workload": "inference", "checkpoint": "yes"}, None, "gpupack.io/checkpoint", "true | false"),
        (
            {"workload": "inference", "latency": "critical", "sharing": "time-slicing"},
            None,
            "gpupack.io/sharing",
            "mig or exclusive",
        ),
        ({"workload": "training", "gpus": "2", "sharing": "mig"}, None, "gpupack.io/gpus", "exclusive"),
        ({"workload": "inference"}, {"container": "ghost"}, "gpupack.io/container", "main"),
    ],
)
def test_invalid_labels_are_refused_with_the_label_and_valid_values(
    labels: dict[str, str], annotations: dict[str, str] | None, named: str, valid: str
) -> None:
    pod = make_pod({W + k: v for k, v in labels.items()}, {W + k: v for k, v in (annotations or {}).items()})
    decision = plan(pod, "team-a", context())
    assert not decision.allowed and decision.outcome == "denied"
    assert named in decision.message and valid in decision.message
    assert decision.ops == []


@pytest.mark.parametrize(
    ("pod", "opted_in", "reason"),
    [
        (make_pod({"app": "web"}), False, "not opted in"),
        (make_pod({W + "workload": "inference"}, namespace="kube-system"), False, "never touched"),
        (make_pod({W + "workload": "inference"}, namespace="gpupack-system"), False, "never touched"),
        (make_pod({W + "workload": "inference"}, {"kubernetes.io/config.mirror": "x"}), False, "mirror"),
        (make_pod({"app": "web"}), True, "no GPU requested"),
    ],
)
def test_pods_outside_the_policy_are_admitted_untouched(pod: dict[str, Any], opted_in: bool, reason: str) -> None:
    decision = plan(pod, pod["metadata"]["namespace"], context(opted_in=opted_in))
    assert decision.allowed and decision.ops == [] and decision.outcome == "skipped"
    assert reason in decision.message


def test_ignored_namespaces_from_the_policy_are_never_touched() -> None:
    pod = make_pod({W + "workload": "inference"}, namespace="legacy")
    assert plan(pod, "legacy", context("ignoredNamespaces: [legacy]")).outcome == "skipped"


def test_gpu_pod_in_an_opted_in_namespace_gets_the_default_class() -> None:
    resources = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    pod = make_pod(containers=[{"name": "m", "image": "i", "resources": resources}])
    after, _ = mutated(pod, "defaultClass: training", opted_in=True)
    assert after["metadata"]["annotations"]["gpupack.io/class"] == "training"


def test_audit_mode_changes_nothing_but_records_what_it_would_do() -> None:
    pod = make_pod({W + "workload": "inference"})
    decision = plan(pod, "team-a", context("mode: audit"))
    assert decision.outcome == "audited"
    assert [op["path"] for op in decision.ops] == ["/metadata/annotations"]
    record = decision.ops[0]["value"]["gpupack.io/audit"]
    assert "nvidia.com/mig-1g.10gb" in record and "never on spot" in record
    assert all(w.startswith("gpupack audit, would:") for w in decision.warnings)
    assert decision.audit_annotations["would"]


def test_audit_mode_admits_invalid_labels_and_says_it_would_refuse() -> None:
    decision = plan(make_pod({W + "workload": "serving"}), "team-a", context("mode: audit"))
    assert decision.allowed and decision.ops == []
    assert "would refuse" in decision.warnings[0]


def test_every_warning_fits_in_120_characters() -> None:
    long_name = "x" * 200
    pod = make_pod({W + "workload": "inference"}, priorityClassName=long_name)
    _, warnings = mutated(pod)
    assert warnings and all(len(w) <= 120 for w in warnings)


def test_annotation_keys_are_escaped_in_patch_paths() -> None:
    decision = plan(make_pod({W + "workload": "training"}, {}), "team-a", context())
    paths = [op["path"] for op in decision.ops]
    assert "/metadata/annotations/cluster-autoscaler.kubernetes.io~1safe-to-evict" in paths
    assert "/metadata/annotations/gpupack.io~1policy-version" in paths


def test_policy_version_is_recorded_and_a_new_version_updates_it() -> None:
    pod = make_pod({W + "workload": "inference"})
    after, _ = mutated(pod)
    again = plan(after, "team-a", context(version="v2"))
    assert again.ops == [{"op": "replace", "path": "/metadata/annotations/gpupack.io~1policy-version", "value": "v2"}]


@pytest.mark.parametrize(
    "raw",
    [
        {"metadata": {}, "spec": {"containers": []}},
        {"metadata": {}, "spec": {"containers": "no"}},
        {"metadata": {"labels": "x"}, "spec": {"containers": [{"name": "a"}]}},
        {"metadata": {}},
    ],
)
def test_unreadable_pod_raises_invalid_object_naming_the_field(raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidObject, match=r"request\.object\."):
        plan(raw, "team-a", context())
