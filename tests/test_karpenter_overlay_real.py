"""The shipped NodeOverlay (examples/gpu-stack/karpenter-nodeoverlay.yaml) on a real Karpenter: an instance type
described as a cloud provider describes it (whole `nvidia.com/gpu`, no MIG devices) gets no node for a pod gpupack
sized to a MIG slice, until the overlay tells Karpenter what the MIG layout gives the node.

The A100 NodePool of the living cluster with its p4d.24xlarge described as AWS does; Karpenter with the feature
gate the example names. The overlay is the example's, for the fixture's pool name (`a100`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpupack.testing.control_plane import ControlPlane, wait_until
from gpupack.testing.living_cluster import (
    PLANE_ARGS,
    LivingCluster,
    missing_tools,
    overlay_for_pool,
    whole_gpu_instance_types,
)
from tests.conftest import ROOT

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
pytestmark = pytest.mark.timeout(300)
EXAMPLE = ROOT / "examples" / "gpu-stack" / "karpenter-nodeoverlay.yaml"
SLICE = "nvidia.com/mig-1g.5gb"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivingCluster]:
    reason = missing_tools()
    if reason:
        pytest.fail(reason)
    work = tmp_path_factory.mktemp("overlay")
    env = {"INSTANCE_TYPES_FILE_PATH": str(whole_gpu_instance_types(work / "types.json", {"p4d.24xlarge": 8})),
           "FEATURE_GATES": "NodeOverlay=true"}  # fmt: skip
    plane = ControlPlane(work / "plane", extra_args=PLANE_ARGS)
    try:
        plane.start()
        plane.namespace("ml")
        with LivingCluster(plane, node_pools=["a100"], karpenter_env=env) as living:
            yield living
    finally:
        plane.stop()


def test_the_example_overlay_lets_karpenter_buy_a_node_for_a_mig_sliced_pod(cluster: LivingCluster) -> None:
    cluster.pod("sliced", "ml", {SLICE: "1"}, run_for="10m")
    # Without the overlay no instance type offers the slice: Karpenter buys nothing and says why
    refused = wait_until(
        lambda: [e for e in cluster.karpenter_events("could not schedule pod") if "sliced" in json.dumps(e)],
        60,
        "Karpenter's log: could not schedule pod ml/sliced",
        every=0.5,
    )
    assert SLICE in json.dumps(refused[0]), refused[0]
    assert cluster.node_claims() == []

    overlay = overlay_for_pool(EXAMPLE, "a100")
    cluster.plane.apply([overlay])

    # Karpenter creates the NodeClaim first and labels it with what it launched a moment later
    (claim,) = cluster.wait_node_claims(
        lambda claims: [c for c in claims if INSTANCE_TYPE in (c["metadata"].get("labels") or {})],
        90,
        "a launched NodeClaim once the overlay exists",
    )
    assert claim["metadata"]["labels"][INSTANCE_TYPE] == "p4d.24xlarge"
    assert claim["spec"]["resources"]["requests"][SLICE] == "1"
    # (the KWOK provider's node shows only what the pods asked for, so the overlay's counts are not read back here)
