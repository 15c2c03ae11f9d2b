"""Sizing through DRA (policy `dra.memorySizing`, gpupack.webhook.claims): which ResourceClaimTemplate a pod
references, what the templates ask for, and the patch the webhook writes."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from gpupack.core.claim_templates import CLAIM, MAX_ALTERNATIVES, claim_templates
from gpupack.core.policy import Policy, parse_policy
from gpupack.webhook.claims import template_for
from gpupack.webhook.mutate import plan
from tests.conftest import W, context, make_pod

ON = "dra:\n  memorySizing: true\n"
GI = Decimal(2**30)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def mutated(pod: dict[str, Any], doc: str = ON) -> tuple[dict[str, Any], list[str]]:
    decision = plan(pod, pod["metadata"].get("namespace"), context(doc))
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(pod, decision.ops), decision.warnings


def inference(memory: str | None = "4Gi", **labels: str) -> dict[str, Any]:
    found = {f"{W}workload": "inference", **{f"{W}{k}": v for k, v in labels.items()}}
    if memory is not None:
        found[f"{W}gpu-memory"] = memory
    return make_pod(found)


@pytest.mark.parametrize(
    ("memory", "template"),
    [("1Gi", "gpupack-gpu-5gi"), ("5Gi", "gpupack-gpu-5gi"), ("5.5Gi", "gpupack-gpu-10gi"),
     ("70Gi", "gpupack-gpu-71gi"), ("141Gi", "gpupack-gpu-141gi"), ("142Gi", None)],
)  # fmt: skip
def test_a_pod_gets_the_template_of_the_smallest_profile_that_holds_it(memory: str, template: str | None) -> None:
    policy = Policy()
    assert template_for(policy, Decimal(memory.removesuffix("Gi")) * GI) == template


def test_each_template_asks_for_the_smallest_fitting_slices_first_then_a_whole_gpu() -> None:
    templates = {t["metadata"]["name"]: t for t in claim_templates(Policy())}
    assert list(templates) == [f"gpupack-gpu-{m}gi" for m in (5, 10, 18, 20, 35, 40, 71, 80, 141)]
    for template in templates.values():
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        alternatives = request["firstAvailable"]
        assert 2 <= len(alternatives) <= MAX_ALTERNATIVES
        assert all(DNS_LABEL.match(a["name"]) for a in alternatives)
        *slices, whole = alternatives
        assert {a["deviceClassName"] for a in slices} == {"mig.nvidia.com"}
        assert whole["deviceClassName"] == "gpu.nvidia.com"
        kubernetes_validate.validate(
            {**template, "metadata": {**template["metadata"], "namespace": "ml"}},
            kubernetes_validate.latest_version(),
            strict=True,
        )
    five = [a["name"] for a in templates["gpupack-gpu-5gi"]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]]
    assert five == ["mig-1g-5gb", "mig-1g-10gb", "mig-2g-10gb", "mig-1g-18gb", "mig-1g-20gb", "mig-2g-20gb",
                    "mig-3g-20gb", "whole-gpu"]  # fmt: skip
    (big,) = templates["gpupack-gpu-141gi"]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][-1:]
    assert "quantity('141Gi')" in big["selectors"][0]["cel"]["expression"]


def test_with_dra_sizing_the_webhook_writes_the_claim_and_no_gpu_resource() -> None:
    pod, warnings = mutated(inference("12Gi"))
    assert pod["spec"]["resourceClaims"] == [{"name": CLAIM, "resourceClaimTemplateName": "gpupack-gpu-18gi"}]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["claims"] == [{"name": CLAIM}]
    assert not [r for r in container["resources"].get("requests", {}) if r.startswith("nvidia.com/")]
    assert "limits" not in container["resources"]
    assert any("ResourceClaimTemplate gpupack-gpu-18gi" in w for w in warnings)
    assert not any("placed by the main scheduler's own plugins" in w for w in warnings)  # the extender packs it
    # the GPU node taint is still tolerated: DRA GPU nodes carry it as device-plugin ones do
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    # a second pass over the mutated pod changes nothing (reinvocation)
    assert plan(pod, "team-a", context(ON)).ops == []


def test_in_the_main_schedulers_mode_a_claim_pod_is_told_the_extender_is_not_asked_about_it() -> None:
    """The main scheduler's extender entry lists managedResources (else every pod of the cluster would reach the
    extender), and a claim pod requests no GPU resource."""
    _, warnings = mutated(inference("12Gi"), ON + "scheduler:\n  name: null\n")
    assert any("placed by the main scheduler's own plugins" in w for w in warnings)


def test_without_dra_sizing_or_for_other_pods_nothing_changes() -> None:
    pod, _ = mutated(inference("12Gi"), "")
    assert "resourceClaims" not in pod["spec"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.18gb": "1"}
    for other in (
        make_pod({f"{W}workload": "training", f"{W}gpus": "2"}),  # whole GPUs
        inference("4Gi", latency="tolerant"),  # time-sliced
        inference("200Gi"),  # more than any profile: a whole GPU
    ):
        pod, _ = mutated(other)
        assert "resourceClaims" not in pod["spec"], other["metadata"]["labels"]


def test_a_pod_that_names_its_own_gpu_keeps_it_unless_the_policy_enforces_the_gpu() -> None:
    own = inference("4Gi")
    own["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    pod, warnings = mutated(own)
    assert "resourceClaims" not in pod["spec"] and any("kept the pod's nvidia.com/gpu=1" in w for w in warnings)
    pod, _ = mutated(own, ON + "enforce: [gpu]\n")
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "gpupack-gpu-5gi"
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})


def test_the_policy_refuses_a_misspelt_dra_field() -> None:
    with pytest.raises(ValueError, match="memorySize"):
        parse_policy(b"dra:\n  memorySize: true\n")


@pytest.mark.parametrize("doc", [ON, ""], ids=["dra-sizing", "device-plugin-sizing"])
def test_the_pods_own_claims_are_kept_beside_what_the_webhook_writes(doc: str) -> None:
    """The planner patches the pod as its model reads it: claims it did not model were dropped by `add` of a whole
    `resources` object."""
    own = inference("4Gi")
    own["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma-nic"}]
    own["spec"]["containers"][0]["resources"] = {"claims": [{"name": "nic"}]}
    pod, _ = mutated(own, doc)
    assert pod["spec"]["resourceClaims"][0] == {"name": "nic", "resourceClaimTemplateName": "rdma-nic"}
    assert pod["spec"]["containers"][0]["resources"]["claims"][0] == {"name": "nic"}
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]
