"""GPUs from a DRA driver, on a real kube-apiserver and kube-scheduler v1.36 with gpupack deployed as shipped.

The nodes of NVIDIA's DRA driver advertise no `nvidia.com/*` in `status.allocatable`: their GPUs are devices of
ResourceSlices, published here as the driver publishes them (`gpupack.testing.dra`). DeviceClasses with
`extendedResourceName` let kube-scheduler satisfy a pod's plain `nvidia.com/gpu` or `nvidia.com/mig-1g.5gb`
request from those devices (`DRAExtendedResource`, beta and on in v1.36): it makes a ResourceClaim for the pod and
allocates a device in it. The extender must count those nodes' devices to let the pods through and pack them.

- mixed: one device-plugin H100 node and two DRA H100 nodes; twelve one-GPU training pods need two nodes, so
  at least one is a DRA node, and packing leaves the third empty;
- DRA only: two A100 nodes whose GPUs are carved into `1g.5gb` MIG devices; labelled inference pods are sized
  to `nvidia.com/mig-1g.5gb` (the webhook learns from the DeviceClasses and slices that DRA serves it),
  allocated MIG devices, and packed onto one node;
- partitionable (dynamic MIG): two one-GPU A100 nodes publish every placement against shared counters; sized
  inference pods get partitions carved on one node, and a whole-GPU pod then goes to the other one, since the
  first has no whole GPU left to carve.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupack.testing.control_plane import ControlPlane, wait_until
from gpupack.testing.deployed import Deployment
from gpupack.testing.dra import driver_classes, gpu_slice, mig_slice, partitionable_slices
from tests.audit_log import audited_plane
from tests.test_deploy_real import ENFORCE, labelled_pod, metric, no_refusals, readme_deploy, run_gpupack, set_policy

ROOT = Path(__file__).resolve().parents[1]
TEAM = "ml-dra"
MERGE = "application/merge-patch+json"
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Deployment]]:
    work = tmp_path_factory.mktemp("dra")
    plane = audited_plane(work, "Metadata").start()
    try:
        deployment = readme_deploy(plane, work)
        # NVIDIA's driver's classes, and gpupack's DRA component serving each MIG profile as an extended resource
        plane.apply(driver_classes())
        plane.kubectl("apply", "-f", str(ROOT / "manifests" / "dra" / "deviceclasses.yaml"))
        plane.node("plugin-1", {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8"}, H100_LABELS)
        for name in ("dra-1", "dra-2"):
            plane.node(name, {"cpu": "96", "memory": "1000Gi"})
            plane.apply([gpu_slice(name, "H100-80GB", 8)])
        for name in ("mig-1", "mig-2"):
            plane.node(name, {"cpu": "96", "memory": "1000Gi"})
            plane.apply([mig_slice(name, "A100-40GB", [{"1g.5gb": 7}] * 2)])
        plane.namespace(TEAM, {"gpupack.io/enabled": "true"})
        run_gpupack(plane, deployment)
        yield plane, deployment
    finally:
        plane.stop()


def claim_of(plane: ControlPlane, pod: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaim kube-scheduler made for the pod's extended-resource request, once allocated."""
    status = pod["status"].get("extendedResourceClaimStatus") or {}
    name = status.get("resourceClaimName")
    assert name, f"{pod['metadata']['name']} has no extended-resource claim: {pod['status']}"
    claim: dict[str, Any] = plane.get(f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaims/{name}")
    return claim


def scheduled_all(plane: ControlPlane, names: list[str], timeout: float = 90) -> list[dict[str, Any]]:
    """The pods, once every one of them is bound (an assertion error naming the pending ones otherwise)."""

    def bound() -> list[dict[str, Any]] | None:
        pods = [plane.pod(TEAM, name) for name in names]
        return pods if all(p and p["spec"].get("nodeName") for p in pods) else None  # type: ignore[misc]

    try:
        found: list[dict[str, Any]] = wait_until(bound, timeout, "every pod bound")
    except AssertionError:
        pending = [n for n in names if not (plane.pod(TEAM, n) or {}).get("spec", {}).get("nodeName")]
        events = [e["message"] for e in plane.events(TEAM) if e.get("involvedObject", {}).get("name") in pending]
        raise AssertionError(f"still pending: {pending}; their events: {events[-6:]}") from None
    return found


def test_mixed_device_plugin_and_dra_nodes_take_training_pods_packed(cluster: tuple[ControlPlane, Deployment]) -> None:
    """Twelve one-GPU pods on 8-GPU nodes: all bound, on two nodes, at least one of them a DRA node, each pod there
    holding a DRA GPU of its node; the third node stays empty for the autoscaler."""
    plane, deployment = cluster
    extender = deployment.pods["gpupack-scheduler"]
    before = metric(extender, "extender", "gpupack_extender_request_duration_seconds_count")
    names = [f"train-{i}" for i in range(12)]
    plane.apply([labelled_pod(n, {"workload": "training", "gpus": "1", "checkpoint": "true"}, TEAM) for n in names])
    pods = scheduled_all(plane, names)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "gpupack-scheduler"
        assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    on = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    used = set(on.values())
    assert len(used) == 2, f"not packed: {on}"
    assert used & {"dra-1", "dra-2"}, on
    for pod in pods:
        if pod["spec"]["nodeName"].startswith("dra-"):
            results = claim_of(plane, pod)["status"]["allocation"]["devices"]["results"]
            assert [(r["driver"], r["pool"]) for r in results] == [("gpu.nvidia.com", pod["spec"]["nodeName"])]
    after = metric(extender, "extender", "gpupack_extender_request_duration_seconds_count")
    assert after - before >= 24  # filter and prioritize for each
    no_refusals(plane)


def test_dra_only_mig_nodes_take_sized_inference_pods_packed(cluster: tuple[ControlPlane, Deployment]) -> None:
    """Inference pods sized by memory get `nvidia.com/mig-1g.5gb`, which only DRA devices serve here, and are
    packed onto one of the two MIG nodes, each holding a MIG device of it."""
    plane, _ = cluster
    names = [f"embed-{i}" for i in range(4)]
    plane.apply([labelled_pod(n, {"workload": "inference", "gpu-memory": "4Gi"}, TEAM) for n in names])
    pods = scheduled_all(plane, names)
    for pod in pods:
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {
            "nvidia.com/mig-1g.5gb": "1",
            **{
                k: v for k, v in pod["spec"]["containers"][0]["resources"]["requests"].items() if k in ("cpu", "memory")
            },
        }
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 1 and nodes <= {"mig-1", "mig-2"}, nodes
    devices = [claim_of(plane, p)["status"]["allocation"]["devices"]["results"][0]["device"] for p in pods]
    assert len(set(devices)) == 4 and all("-mig-1g5gb-" in d for d in devices), devices
    no_refusals(plane)


def test_partitionable_gpus_take_carved_slices_packed_and_a_whole_gpu_where_one_is_left(
    cluster: tuple[ControlPlane, Deployment],
) -> None:
    plane, _ = cluster
    others = [n["metadata"]["name"] for n in plane.get("/api/v1/nodes")["items"]]
    for name in others:  # the other scenarios' nodes are left out of this one
        plane.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}}, MERGE)
    try:
        for name in ("dyn-1", "dyn-2"):
            plane.node(name, {"cpu": "96", "memory": "1000Gi"})
            plane.apply(partitionable_slices(name, "A100-40GB", 1))
        names = [f"carve-{i}" for i in range(3)]
        plane.apply([labelled_pod(n, {"workload": "inference", "gpu-memory": "4Gi"}, TEAM) for n in names])
        pods = scheduled_all(plane, names)
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert len(nodes) == 1, nodes
        devices = {claim_of(plane, p)["status"]["allocation"]["devices"]["results"][0]["device"] for p in pods}
        assert len(devices) == 3 and all("-mig-1g5gb-" in d for d in devices), devices
        plane.apply([labelled_pod("whole", {"workload": "training", "gpus": "1", "checkpoint": "true"}, TEAM)])
        (whole,) = scheduled_all(plane, ["whole"])
        assert whole["spec"]["nodeName"] == ({"dyn-1", "dyn-2"} - nodes).pop()
        assert claim_of(plane, whole)["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
        no_refusals(plane)
    finally:  # the other nodes back, these out of the other scenarios
        for name, unschedulable in [*((n, False) for n in others), ("dyn-1", True), ("dyn-2", True)]:
            with contextlib.suppress(urllib.error.HTTPError):
                plane.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": unschedulable}}, MERGE)


def cordon(plane: ControlPlane, names: list[str], unschedulable: bool = True) -> None:
    for name in names:
        with contextlib.suppress(urllib.error.HTTPError):
            plane.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": unschedulable}}, MERGE)


def claim_controller(plane: ControlPlane) -> None:
    """kube-controller-manager's resource claim controller (claims from templates) and garbage collector."""
    assert plane.tools.kube_controller_manager is not None
    plane.spawn(
        "kube-controller-manager",
        [
            str(plane.tools.kube_controller_manager),
            f"--kubeconfig={plane.admin_kubeconfig}",
            "--secure-port=0",
            "--leader-elect=false",
            "--controllers=resourceclaim-controller,garbage-collector-controller",
        ],
    )


def sized(plane: ControlPlane, prefix: str, count: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    plane.apply([labelled_pod(n, {"workload": "inference", "gpu-memory": "4Gi"}, TEAM) for n in names])
    return names


def test_memory_sizing_through_dra_takes_a_second_gpu_model_when_the_first_is_full(
    cluster: tuple[ControlPlane, Deployment],
) -> None:
    """One A100-40GB (seven 1g.5gb) and one H100 (seven 1g.10gb), eight pods of 4Gi. Pinned to the A100's
    `nvidia.com/mig-1g.5gb`, the eighth waits with kube-scheduler's reason though the H100 is free. With
    `dra.memorySizing`, each pod's claim asks for a 1g.5gb, else a 1g.10gb..., so once seven fill the A100 the
    eighth takes an H100 slice. Then two more A100s: four such pods are packed onto one of them, since the
    gpupack scheduler asks the extender about every pod it gets (no `managedResources`, which lists GPU resources
    and would leave out pods that request a claim instead)."""
    plane, deployment = cluster
    others = [n["metadata"]["name"] for n in plane.get("/api/v1/nodes")["items"]]
    cordon(plane, others)
    try:
        claim_controller(plane)
        plane.kubectl("apply", "-n", TEAM, "-f", str(ROOT / "manifests" / "dra" / "claimtemplates.yaml"))
        for suffix in ("pinned", "sized"):
            plane.node(f"a100-{suffix}", {"cpu": "96", "memory": "1000Gi"})
            plane.apply([mig_slice(f"a100-{suffix}", "A100-40GB", [{"1g.5gb": 7}])])
            plane.node(f"h100-{suffix}", {"cpu": "96", "memory": "1000Gi"})
            plane.apply([mig_slice(f"h100-{suffix}", "H100-80GB", [{"1g.10gb": 7}])])
        cordon(plane, ["a100-sized", "h100-sized"])

        # device-plugin names (the default): pinned to the A100's profile
        pinned = sized(plane, "pinned", 8)
        bound = scheduled_all(plane, pinned[:7])
        assert {p["spec"]["nodeName"] for p in bound} == {"a100-pinned"}
        waiting = wait_until(
            lambda: [
                e
                for e in plane.events(TEAM)
                if e["involvedObject"]["name"] == pinned[7] and e["reason"] == "FailedScheduling"
            ],
            60,
            "the eighth pod's FailedScheduling event",
        )
        assert "nvidia.com/mig-1g.5gb" in waiting[-1]["message"] or "cannot allocate" in waiting[-1]["message"]
        assert not (plane.pod(TEAM, pinned[7]) or {})["spec"].get("nodeName")
        plane.kubectl("-n", TEAM, "delete", "pod", pinned[7], "--wait=false")  # it would take a slice below
        cordon(plane, ["a100-pinned", "h100-pinned"])
        cordon(plane, ["a100-sized"], unschedulable=False)  # the H100 joins once the A100 is full

        # DRA sizing on: the policy reloaded by the running webhook
        set_policy(plane, ENFORCE + "dra:\n  memorySizing: true\n")
        deployment.sync_volumes()
        probe = labelled_pod("probe", {"workload": "inference", "gpu-memory": "4Gi"}, TEAM)

        def dry_run_has_claim() -> bool:
            done = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(probe))
            return bool(json.loads(done.stdout)["spec"].get("resourceClaims"))

        wait_until(dry_run_has_claim, 60, "the webhook sizing through DRA")
        first = scheduled_all(plane, sized(plane, "sized", 7))
        assert {p["spec"]["nodeName"] for p in first} == {"a100-sized"}
        cordon(plane, ["h100-sized"], unschedulable=False)
        (late,) = scheduled_all(plane, sized(plane, "late", 1))
        assert late["spec"]["nodeName"] == "h100-sized"  # the A100 is full: the next model's smallest slice
        pods = [*first, late]
        for pod in pods:
            assert pod["spec"]["resourceClaims"] == [
                {"name": "gpupack-gpu", "resourceClaimTemplateName": "gpupack-gpu-5gi"}
            ]
            assert not any(
                r.startswith("nvidia.com/") for r in pod["spec"]["containers"][0]["resources"].get("requests", {})
            )
        (status,) = late["status"]["resourceClaimStatuses"]
        claim = plane.get(f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaims/{status['resourceClaimName']}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["request"] == "gpu/mig-1g-10gb" and "-mig-1g10gb-" in result["device"], result

        # packed: two empty A100s, four pods; kube-scheduler alone spreads them (its least-allocated score)
        cordon(plane, ["a100-sized", "h100-sized"])
        for name in ("a100-x", "a100-y"):
            plane.node(name, {"cpu": "96", "memory": "1000Gi"})
            plane.apply([mig_slice(name, "A100-40GB", [{"1g.5gb": 7}])])
        packed = scheduled_all(plane, sized(plane, "packed", 4))
        assert len({p["spec"]["nodeName"] for p in packed}) == 1, [p["spec"]["nodeName"] for p in packed]
        no_refusals(plane)
    finally:
        set_policy(plane, ENFORCE)
        deployment.sync_volumes()
        cordon(plane, others, unschedulable=False)
        cordon(plane, ["a100-pinned", "h100-pinned", "a100-sized", "h100-sized", "a100-x", "a100-y"])


def raw_pod(name: str, namespace: str, priority: str) -> dict[str, Any]:
    """A pod gpupack does not size (its namespace is not opted in) asking the gpupack scheduler for one GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "gpupack-scheduler",
            "priorityClassName": priority,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def test_kube_scheduler_preempts_no_pod_for_a_dra_device_so_the_preempt_verb_is_never_asked(
    cluster: tuple[ControlPlane, Deployment],
) -> None:
    """Kubernetes v1.36 does not preempt for DRA devices (the DRA page's "Limitations"; KEP-5690, planned beta in
    v1.37): a high-priority pod waits behind a low-priority one holding the only GPU of a DRA node, where on a
    device-plugin node the low one would be preempted (tests/test_preemption_real.py). The extender's preempt verb
    judges DRA nodes as device-plugin ones (tests/test_dra.py), but kube-scheduler finds no candidate to ask it
    about. When this test fails, kube-scheduler preempts on DRA nodes: show the verb at work here."""
    plane, deployment = cluster
    others = [n["metadata"]["name"] for n in plane.get("/api/v1/nodes")["items"]]
    cordon(plane, others)
    namespace = "dra-priorities"
    try:
        plane.apply(
            [
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
                for n, v in (("dra-low", 10), ("dra-high", 1_000_000))
            ]
        )
        plane.node("dra-one", {"cpu": "96", "memory": "1000Gi"})
        plane.apply([gpu_slice("dra-one", "H100-80GB", 1)])
        plane.namespace(namespace)
        plane.apply([raw_pod("low", namespace, "dra-low")])
        wait_until(lambda: (plane.pod(namespace, "low") or {}).get("spec", {}).get("nodeName"), 60, "low bound")
        extender = deployment.pods["gpupack-scheduler"]
        asked = 'gpupack_extender_request_duration_seconds_count{verb="preempt"}'
        before = metric(extender, "extender", asked)
        plane.apply([raw_pod("high", namespace, "dra-high")])
        failed = wait_until(
            lambda: [
                e
                for e in plane.events(namespace)
                if e["involvedObject"]["name"] == "high" and e["reason"] == "FailedScheduling"
            ],
            60,
            "the high-priority pod's FailedScheduling event",
        )
        # "0/6 nodes are available: 1 cannot allocate all claims, 5 node(s) were unschedulable. still not
        # schedulable, preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling."
        message = failed[-1]["message"]
        assert "cannot allocate all claims" in message and "Preemption is not helpful for scheduling" in message
        time.sleep(5)  # room for a preemption that does not come
        assert (plane.pod(namespace, "low") or {})["spec"]["nodeName"] == "dra-one"
        assert not (plane.pod(namespace, "high") or {})["spec"].get("nodeName")
        assert not (plane.pod(namespace, "high") or {}).get("status", {}).get("nominatedNodeName")
        assert metric(extender, "extender", asked) == before
        no_refusals(plane)
    finally:
        with contextlib.suppress(Exception):
            plane.kubectl("delete", "namespace", namespace, "--wait=false")
        cordon(plane, others, unschedulable=False)
        with contextlib.suppress(Exception):
            cordon(plane, ["dra-one"])
