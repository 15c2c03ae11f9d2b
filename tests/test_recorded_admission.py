"""Every AdmissionReview recorded from a real v1.36 API server: the exact patch, and a patched pod that the
Kubernetes Pod schema (1.30 and the newest the validator ships) accepts in strict mode."""

from __future__ import annotations

from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from gpupack.webhook.mutate import plan
from tests.conftest import ADMISSION, RECORDED_POLICY, context, recorded_facts, recorded_review

SPOT_LABELS = [
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
    ("node-type", "spot"),
]
"""The spot labels the default policy recognises: Karpenter's, the clouds', the cluster's own (`node-type`)."""
AFFINITY_NO_SPOT = {
    "op": "add",
    "path": "/spec/affinity",
    "value": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "NotIn", "values": [v]} for k, v in SPOT_LABELS]}
                ]
            }
        }
    },
}
AFFINITY_SPOT = {
    "op": "add",
    "path": "/spec/affinity",
    "value": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in SPOT_LABELS
                ]
            }
        }
    },
}
WELL_KNOWN_TOLERATIONS = [
    {
        "op": "add",
        "path": "/spec/tolerations/-",
        "value": {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"},
    }
    for key, value in (("kubernetes.azure.com/scalesetpriority", "spot"), ("cloud.google.com/gke-spot", "true"))
]


def gpu_tolerations(resource: str | None = None) -> list[dict[str, Any]]:
    """The tolerations of the GPU pools' taints: `nvidia.com/gpu`, and the pod's GPU resource as the
    ExtendedResourceToleration plugin keys it (it ran before the webhook and never saw gpupack's request)."""
    keys = ["nvidia.com/gpu"] + ([resource] if resource else [])
    return [
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": k, "operator": "Exists", "effect": "NoSchedule"}}
        for k in keys
    ]


INFERENCE_PRIORITY = [
    {"op": "add", "path": "/spec/priorityClassName", "value": "gpu-inference-high"},
    {"op": "replace", "path": "/spec/priority", "value": 100000},
]
REQUESTS_INFERENCE = [
    {"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "1"},
    {"op": "add", "path": "/spec/containers/0/resources/requests/memory", "value": "4Gi"},
]
# Every recorded pod arrives with the API server's default: the webhook names the gpupack scheduler instead.
ROUTED = {"op": "replace", "path": "/spec/schedulerName", "value": "gpupack-scheduler"}
NEW_ANNOTATIONS = {
    "inference": {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {"gpupack.io/class": "inference", "gpupack.io/policy-version": "test"},
    },
    "batch": {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {"gpupack.io/class": "batch", "gpupack.io/policy-version": "test"},
    },
}

EXPECTED: dict[str, list[dict[str, Any]] | None] = {
    # 8Gi on a cluster whose nodes advertise 1g.5gb, 2g.10gb, 3g.20gb: 2g.10gb, which the pod already asks for.
    "000-mutate-llm-infer-7b-abc12": [
        *gpu_tolerations("nvidia.com/mig-2g.10gb"),
        AFFINITY_NO_SPOT,
        *INFERENCE_PRIORITY,
        ROUTED,
        {"op": "add", "path": "/metadata/annotations/gpupack.io~1class", "value": "inference"},
        {"op": "add", "path": "/metadata/annotations/gpupack.io~1policy-version", "value": "test"},
    ],
    "001-mutate-bert-batch": [
        *gpu_tolerations("nvidia.com/gpu.shared"),
        {"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "1"},
        {"op": "add", "path": "/spec/containers/0/resources/requests/memory", "value": "2Gi"},
        AFFINITY_SPOT,
        {
            "op": "add",
            "path": "/spec/tolerations/-",
            "value": {"key": "node-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
        },
        *WELL_KNOWN_TOLERATIONS,
        {"op": "add", "path": "/spec/priorityClassName", "value": "gpu-batch-low"},
        {"op": "replace", "path": "/spec/priority", "value": -10},
        {"op": "replace", "path": "/spec/preemptionPolicy", "value": "Never"},
        ROUTED,
        NEW_ANNOTATIONS["batch"],
    ],
    # Already on spot with the toleration and its own requests; gpupack-training is not in the API: left out.
    # It does not checkpoint, so the policy would keep it off spot, but its own choice of spot is kept (nothing
    # enforced): no spot toleration added. Both autoscalers are told not to disrupt it.
    "002-mutate-ddp-worker-0": [
        *gpu_tolerations(),
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        },
        {"op": "add", "path": "/metadata/annotations/karpenter.sh~1do-not-disrupt", "value": "true"},
        ROUTED,
        {"op": "add", "path": "/metadata/annotations/gpupack.io~1class", "value": "training"},
        {"op": "add", "path": "/metadata/annotations/gpupack.io~1policy-version", "value": "test"},
    ],
    "003-mutate-redis-cache-0": None,  # CPU-only, not opted in: admitted untouched
    # The pod names its own PriorityClass: kept, so priority fields are left alone.
    "004-mutate-notebook-gpu": [
        *gpu_tolerations("nvidia.com/mig-1g.5gb"),
        *REQUESTS_INFERENCE,
        AFFINITY_NO_SPOT,
        ROUTED,
        NEW_ANNOTATIONS["inference"],
    ],
    "005-mutate-dry-run-infer": [
        *gpu_tolerations("nvidia.com/mig-1g.5gb"),
        *REQUESTS_INFERENCE,
        AFFINITY_NO_SPOT,
        *INFERENCE_PRIORITY,
        ROUTED,
        NEW_ANNOTATIONS["inference"],
    ],
    "006-mutate-embed-shared-1": [
        *gpu_tolerations("nvidia.com/gpu.shared"),
        *REQUESTS_INFERENCE,
        AFFINITY_NO_SPOT,
        *INFERENCE_PRIORITY,
        ROUTED,
        NEW_ANNOTATIONS["inference"],
    ],
}

NAMES = sorted(p.stem for p in ADMISSION.glob("*.json"))
SCHEMA_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def test_every_recorded_review_has_an_expectation() -> None:
    assert NAMES == sorted(EXPECTED)


@pytest.mark.parametrize("name", NAMES)
def test_recorded_review_gets_the_expected_patch(name: str) -> None:
    request = recorded_review(name)["request"]
    decision = plan(request["object"], request["namespace"], context(RECORDED_POLICY, recorded_facts()))
    assert decision.allowed
    assert decision.ops == (EXPECTED[name] or [])
    assert decision.outcome == ("skipped" if EXPECTED[name] is None else "mutated")


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("name", NAMES)
def test_patched_recorded_pod_validates_against_the_pod_schema(name: str, version: str) -> None:
    request = recorded_review(name)["request"]
    decision = plan(request["object"], request["namespace"], context(RECORDED_POLICY, recorded_facts()))
    patched = jsonpatch.apply_patch(request["object"], decision.ops)
    kubernetes_validate.validate(patched, version, strict=True)


@pytest.mark.parametrize("name", NAMES)
def test_recorded_pod_is_idempotent_on_reinvocation(name: str) -> None:
    request = recorded_review(name)["request"]
    ctx = context(RECORDED_POLICY, recorded_facts())
    first = plan(request["object"], request["namespace"], ctx)
    patched = jsonpatch.apply_patch(request["object"], first.ops)
    assert plan(patched, request["namespace"], ctx).ops == []


def test_recorded_training_pod_warns_that_its_priority_class_is_missing() -> None:
    request = recorded_review("002-mutate-ddp-worker-0")["request"]
    decision = plan(request["object"], request["namespace"], context(RECORDED_POLICY, recorded_facts()))
    assert any("PriorityClass gpupack-training not found in the API" in w for w in decision.warnings)


def test_recorded_statefulset_pod_in_opted_in_namespace_is_kept_off_spot() -> None:
    request = recorded_review("003-mutate-redis-cache-0")["request"]
    decision = plan(request["object"], request["namespace"], context(RECORDED_POLICY, recorded_facts(), opted_in=True))
    assert decision.ops[0] == AFFINITY_NO_SPOT
    assert not any(op["path"].startswith("/spec/containers") for op in decision.ops)
