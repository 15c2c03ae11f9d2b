"""The deployable manifests: kustomize builds them, every object validates against the Kubernetes schemas,
and what they say agrees with the code (policy file, PriorityClass values, webhook paths)."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpupack.core.policy import parse_policy
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
    (configmap,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"] == "gpupack-policy"]
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


def test_scheduler_calls_the_extender_it_runs_beside(objects: list[dict[str, Any]]) -> None:
    """The KubeSchedulerConfiguration points at the sidecar's port and verbs, in the cache-capable form, for every
    pod the webhook sends it: no managedResources, which would leave out pods sized through a GPU claim."""
    config_map = next(o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("gpupack-scheduler"))
    config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    (extender,) = config["extenders"]
    (deployment,) = [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"] == "gpupack-scheduler"]
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    args = containers["extender"]["args"]
    assert extender["urlPrefix"] == "http://127.0.0.1:" + next(a.split("=")[1] for a in args if a.startswith("--port"))
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["nodeCacheCapable"]) == (
        "filter",
        "prioritize",
        True,
    )
    assert config["profiles"][0]["schedulerName"] == "gpupack-scheduler"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["scheduler-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert "managedResources" not in extender


def test_the_policy_reads_the_lease_the_shipped_scheduler_elects_its_leader_in() -> None:
    """The webhook judges the gpupack scheduler by the Lease its leader election writes: same namespace and name,
    and the scheduler's profile is the name the webhook writes into pods."""
    config = yaml.safe_load((ROOT / "manifests/extender/scheduler-config.yaml").read_text())
    election = config["leaderElection"]
    scheduler = parse_policy(b"").scheduler
    assert election["leaderElect"] is True and election.get("resourceLock", "leases") == "leases"
    assert (election["resourceNamespace"], election["resourceName"]) == (
        scheduler.lease.namespace,
        scheduler.lease.name,
    )
    assert scheduler.name in [profile["schedulerName"] for profile in config["profiles"]]


def test_the_webhook_may_get_that_one_lease_and_nothing_more_about_leases(objects: list[dict[str, Any]]) -> None:
    (deployment,) = [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"] == "gpupack-webhook"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    lease = parse_policy(b"").scheduler.lease
    bindings = [
        b
        for b in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding")
        if {"kind": "ServiceAccount", "name": account, "namespace": "gpupack-system"} in b["subjects"]
    ]
    roles = {(o["kind"], o["metadata"]["name"]): o for o in by_kind(objects, "Role") + by_kind(objects, "ClusterRole")}
    lease_rules = []
    for binding in bindings:
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if "coordination.k8s.io" in rule["apiGroups"]:
                lease_rules.append((role["kind"], role["metadata"].get("namespace"), rule))
    assert lease_rules == [
        (
            "Role",
            lease.namespace,
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [lease.name],
                "verbs": ["get"],
            },
        )
    ]
