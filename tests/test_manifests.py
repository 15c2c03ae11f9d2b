"""The deployable manifests: kustomize builds them, every object validates against the Kubernetes schemas,
and what they say agrees with the code (policy file, PriorityClass values, webhook paths)."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpupack.policy import parse_policy
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests")], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_object_validates_strictly(objects: list[dict[str, Any]], version: str) -> None:
    assert len(objects) >= 10
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_shipped_policy_validates(objects: list[dict[str, Any]]) -> None:
    (configmap,) = by_kind(objects, "ConfigMap")
    policy = parse_policy(configmap["data"]["policy.yaml"].encode())
    assert policy.mode == "audit"  # the canary step comes first


def test_priority_classes_match_the_policy_defaults(objects: list[dict[str, Any]]) -> None:
    defaults = parse_policy(b"").priority_classes
    classes = {o["metadata"]["name"]: (o["value"], o["preemptionPolicy"]) for o in by_kind(objects, "PriorityClass")}
    assert classes == {name: (spec.value, spec.preemption_policy) for name, spec in defaults.items()}


def test_webhook_registrations_call_the_served_paths(objects: list[dict[str, Any]]) -> None:
    (config,) = by_kind(objects, "MutatingWebhookConfiguration")
    paths = {w["name"]: w["clientConfig"]["service"]["path"] for w in config["webhooks"]}
    assert paths == {"pods.gpupack.io": "/mutate", "namespaces.gpupack.io": "/mutate/opted-in-namespace"}
    for hook in config["webhooks"]:
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn" and {"kube-system", "gpupack-system"} <= set(excluded["values"])
        assert hook["reinvocationPolicy"] == "IfNeeded" and hook["sideEffects"] == "None"
