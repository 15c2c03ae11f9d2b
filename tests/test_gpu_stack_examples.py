"""The GPU stack's own settings in examples/gpu-stack/ against what gpupack assumes: the device plugin's
time-slicing gives the policy's shared resource, every MIG layout fits gpupack's catalog, Cluster Autoscaler runs with
the guide's (docs/method.md) scale-down flags, and the spot NodePool carries the policy's spot label and taint. Their
schema
validation is in test_monitoring_manifests.py, with every other shipped object."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from gpupack.core.admitted import admitted_pod
from gpupack.core.gpus.catalog import CATALOG, MigProfile, mig_model_of
from gpupack.core.gpus.stock import STOCK
from gpupack.core.policy import parse_policy
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch
from tests.conftest import ROOT
from tests.crd_kit import load_documents

EXAMPLES = ROOT / "examples" / "gpu-stack"

Obj = dict[str, Any]
RECOMMENDED_CONSOLIDATION = "WhenEmpty"
"""The policy docs/admins/karpenter.md recommends from the cluster benchmark."""
LABEL_VALUE = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"


def example(name: str) -> Obj:
    (doc,) = load_documents(EXAMPLES / name)
    return doc


def test_the_device_plugin_time_slices_into_the_resource_gpupacks_policy_expects() -> None:
    configmap = example("device-plugin-config.yaml")
    configs = {name: yaml.safe_load(text) for name, text in configmap["data"].items()}
    assert all(config["version"] == "v1" for config in configs.values())
    assert "sharing" not in configs["no-sharing"]
    sharing = configs["time-slicing-4"]["sharing"]
    assert set(sharing) == {"timeSlicing"}  # not MPS
    slicing = sharing["timeSlicing"]
    assert slicing["renameByDefault"] is True and slicing["failRequestsGreaterThanOne"] is True
    assert slicing["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    # renameByDefault advertises `<name>.shared` (the plugin's DefaultSharedResourceNameSuffix).
    assert slicing["resources"][0]["name"] + ".shared" == parse_policy(b"").time_slicing.resource_name
    # Selected per node by this label value, which must be a valid label value.
    assert all(re.fullmatch(LABEL_VALUE, name) for name in configs)


def placements(profiles: dict[str, int], catalog: dict[str, MigProfile]) -> bool:
    """Whether these instances fit one GPU: each at one of its profile's start slices, memory slices not
    overlapping, compute slices at most 7 (NVIDIA MIG User Guide geometry, gpupack/core/gpus/catalog.py)."""
    instances = sorted(
        (catalog[name] for name, count in profiles.items() for _ in range(count)), key=lambda p: -p.memory_slices
    )
    if sum(p.compute_slices for p in instances) > 7:
        return False

    def place(index: int, used: frozenset[int]) -> bool:
        if index == len(instances):
            return True
        profile = instances[index]
        for start in profile.starts:
            span = frozenset(range(start, start + profile.memory_slices))
            if not span & used and place(index + 1, used | span):
                return True
        return False

    return place(0, frozenset())


def mig_layouts() -> dict[str, list[Obj]]:
    layouts: dict[str, list[Obj]] = yaml.safe_load(example("mig-parted-config.yaml")["data"]["config.yaml"])[
        "mig-configs"
    ]
    return layouts


@pytest.mark.parametrize("model", ["A100-80GB", "H100-80GB"])
def test_every_mig_layout_uses_only_profiles_and_counts_legal_for_the_gpu(model: str) -> None:
    config = yaml.safe_load(example("mig-parted-config.yaml")["data"]["config.yaml"])
    assert config["version"] == "v1"
    catalog = {p.name: p for p in CATALOG[model]}
    layouts = mig_layouts()
    assert layouts["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    for name, entries in layouts.items():
        assert re.fullmatch(LABEL_VALUE, name), name  # a label value
        for entry in entries:
            assert entry["devices"] == "all" or all(isinstance(d, int) for d in entry["devices"])
            devices = entry.get("mig-devices", {})
            assert bool(devices) == entry["mig-enabled"], name
            assert set(devices) <= catalog.keys(), (name, set(devices) - catalog.keys())
            assert all(count <= catalog[p].max_instances for p, count in devices.items()), name
            assert placements(devices, catalog), (name, devices)


@pytest.mark.parametrize(
    "layout",
    [
        {"3g.40gb": 3},
        {"1g.10gb": 8},
        {"4g.40gb": 2},
        {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1},
        {"7g.80gb": 1, "1g.10gb": 1},
    ],
)
def test_the_layout_check_refuses_a_gpu_that_cannot_hold_the_instances(layout: dict[str, int]) -> None:
    assert not placements(layout, {p.name: p for p in CATALOG["A100-80GB"]})


def test_the_cluster_autoscaler_runs_with_the_guides_scale_down_flags() -> None:
    deployment = example("cluster-autoscaler.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"] if arg.startswith("--") and "=" in arg)
    assert {
        name: flags.get(name)
        for name in (
            "--scale-down-utilization-threshold",
            "--scale-down-gpu-utilization-threshold",
            "--scale-down-unneeded-time",
            "--ignore-daemonsets-utilization",
        )
    } == {
        "--scale-down-utilization-threshold": "0.5",
        "--scale-down-gpu-utilization-threshold": "0.5",
        "--scale-down-unneeded-time": "10m",
        "--ignore-daemonsets-utilization": "true",
    }


def test_the_node_pool_lets_gpupack_choose_spot_per_pod_and_its_gpu_pods_tolerate_its_taint() -> None:
    pool = example("karpenter-nodepool.yaml")
    template = pool["spec"]["template"]
    requirements = {r["key"]: r for r in template["spec"]["requirements"]}
    # both capacity types: the affinity gpupack writes picks spot for batch and on-demand for inference
    assert set(requirements["karpenter.sh/capacity-type"]["values"]) == {"spot", "on-demand"}
    assert ("karpenter.sh/capacity-type", "spot") in parse_policy(b"").spot.recognised
    # the webhook's tolerations for an inference pod sized to a MIG slice tolerate the pool's taint
    pod = admitted_pod("chat-0", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "4Gi"})
    decision = plan(pod, "ml-serving", MutationContext(policy=parse_policy(b""), version="test"))
    tolerations = apply_patch(pod, decision.ops)["spec"]["tolerations"]
    for taint in template["spec"]["taints"]:
        assert any(
            t["key"] == taint["key"] and t["operator"] == "Exists" and t["effect"] == taint["effect"]
            for t in tolerations
        ), (taint, tolerations)
    disruption = pool["spec"]["disruption"]
    assert disruption["consolidationPolicy"] == RECOMMENDED_CONSOLIDATION
    assert f"`{RECOMMENDED_CONSOLIDATION}`" in (ROOT / "docs" / "admins" / "karpenter.md").read_text()


def test_the_node_overlay_gives_karpenter_the_mig_devices_of_the_pools_layout() -> None:
    pool, overlay = example("karpenter-nodepool.yaml"), example("karpenter-nodeoverlay.yaml")
    labels = pool["spec"]["template"]["metadata"]["labels"]
    model = mig_model_of(labels["nvidia.com/gpu.product"])
    assert model == "A100-40GB"
    (instance_type,) = next(
        r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]
        if r["key"] == "node.kubernetes.io/instance-type"
    )  # fmt: skip
    gpus = {"p4d.24xlarge": 8}[instance_type]
    per_gpu = STOCK[labels["nvidia.com/mig.config"]][model]
    assert overlay["spec"]["capacity"] == {f"nvidia.com/mig-{p}": str(n * gpus) for p, n in per_gpu}
    selects = {r["key"]: r["values"] for r in overlay["spec"]["requirements"]}
    assert selects == {
        "karpenter.sh/nodepool": [pool["metadata"]["name"]],
        "node.kubernetes.io/instance-type": [instance_type],
    }
