"""One arm of the cluster benchmark: a fresh living cluster (`gpupack.testing.living_cluster`), gpupack deployed
or not, the day's Deployments scaled and Jobs created on time (one simulated minute = `seconds_per_hour / 60`
seconds), and what it cost, read off the API:

- every second, the GPU nodes Karpenter has made (their NodePool, capacity type and instance type);
- every pod's life from a watch of all pods: created, bound, Running, Succeeded, and whether it was disrupted (a
  `DisruptionTarget` condition: an eviction by Karpenter's consolidation, a preemption) or failed.

Arms (`ARMS`): `before`, pods as teams write them without gpupack (whole `nvidia.com/gpu`, their model pinned,
the GPU pools' toleration as the ExtendedResourceToleration plugin would give it) on machines whose GPUs nobody
partitions, default scheduler; `requests`, gpupack's webhook only (its MIG and time-sliced requests, spot rules,
priorities and annotations), routing off, so the default scheduler places them; `gpupack`, as shipped, the
extender placing them.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.cluster.workload import Day, JobStart
from gpupack.core.checkout import REPOSITORY
from gpupack.simulator.day.cluster import without_gpupack
from gpupack.testing.control_plane import ControlPlane, wait_until
from gpupack.testing.deployed import Deployment, install_kustomize
from gpupack.testing.living_cluster import (
    FIXTURES,
    GPU_TOLERATION,
    NODEPOOL,
    PLANE_ARGS,
    RUN_FOR,
    LivingCluster,
    overlay_for_pool,
    whole_gpu_instance_types,
)

Arm = Literal["before", "requests", "gpupack"]
ARMS: tuple[Arm, ...] = ("before", "requests", "gpupack")
CAPACITY = "karpenter.sh/capacity-type"
INSTANCE = "node.kubernetes.io/instance-type"
WHOLE_GPUS = {"p4d.24xlarge": 8, "p5.48xlarge": 8, "g4dn.12xlarge": 4}
"""The same machines in a cluster without gpupack: nobody partitions the GPUs, the device plugin advertises whole
`nvidia.com/gpu`."""
OVERLAY = REPOSITORY / "examples" / "gpu-stack" / "karpenter-nodeoverlay.yaml"
"""The example NodeOverlay, applied for the A100 pool in the arms with gpupack: Karpenter starts every pool at zero
nodes, so no node has advertised a MIG resource when the first pods come, and the webhook sizes them by what the
overlay says the pool's nodes will have (docs/admins/karpenter.md). Without it, the shipped `migProfiles` give an
8Gi pod `1g.10gb`, which `all-balanced` has not, and no node is ever bought for it (the first run of 2026-12-04).
The living cluster's instance types already list the MIG devices, so Karpenter runs without the NodeOverlay
gate."""
POLICIES: Mapping[Arm, str] = {
    "requests": "mode: enforce\nscheduler: {name: null}\n",
    "gpupack": "mode: enforce\n",
}
"""The policy each arm with gpupack runs: the shipped one, enforcing; `requests` without routing."""


def prices() -> dict[tuple[str, str], float]:
    """(instance type, capacity type) -> USD per hour, the fixture's example prices (the lowest offering)."""
    out: dict[tuple[str, str], float] = {}
    for found in json.loads((FIXTURES / "instance-types.json").read_text()):
        for offering in found["offerings"]:
            capacity = next(r["values"][0] for r in offering["Requirements"] if r["key"] == CAPACITY)
            key = (found["name"], capacity)
            out[key] = min(out.get(key, float("inf")), float(offering["Price"]))
    return out


@dataclass
class PodLife:
    """One pod's life, in seconds since the arm started."""

    created: float
    kind: str
    """`inference`, `training` or `batch` (the scenario's, from the pod's name)."""
    bound: float | None = None
    ended: str | None = None
    """`Succeeded` or `Failed`."""
    disrupted: str | None = None
    """The reason of its `DisruptionTarget` condition, if it got one."""
    workload: str = ""
    """The scenario's workload it belongs to (`chat`, `finetune`...)."""
    gpu: str = ""
    """The GPU resource it asks for (`nvidia.com/mig-2g.10gb`), as admitted."""
    node: str = ""


@dataclass
class Record:
    """What one arm measured."""

    arm: str
    consolidation: str
    seconds_per_hour: float
    nodes: list[tuple[float, int, float]] = field(default_factory=list)
    """(seconds since start, GPU nodes, their price per hour) at each sample."""
    pools: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    """(seconds since start, GPU nodes by `pool/capacity type`) at each sample."""
    node_pool: dict[str, str] = field(default_factory=dict)
    """Each node seen, its `pool/capacity type`."""
    pods: dict[str, PodLife] = field(default_factory=dict)
    jobs_created: int = 0
    jobs_succeeded: int = 0
    jobs_failed: int = 0
    started: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.started


def template(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as a controller's template: labels, annotations and spec, no name or owner."""
    meta = pod["metadata"]
    spec = {k: v for k, v in pod["spec"].items() if k not in ("nodeName",)}
    return {"metadata": {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
            "spec": spec}  # fmt: skip


def written(arm: Arm, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the arm's teams write it."""
    if arm != "before":
        return pod
    found = copy.deepcopy(without_gpupack(pod))
    found["spec"]["tolerations"] = [*found["spec"].get("tolerations", []), dict(GPU_TOLERATION)]
    return found


class ArmRun:
    """One arm on its own living cluster; `run()` returns the Record."""

    def __init__(self, arm: Arm, day: Day, work: Path, seconds_per_hour: float, consolidation: str) -> None:
        self.arm, self.day, self.work = arm, day, work
        self.scale = seconds_per_hour / 60.0
        """Real seconds per simulated minute."""
        self.record = Record(arm, consolidation, seconds_per_hour)
        self.consolidation = consolidation
        self.stop = threading.Event()
        self.prices = prices()

    def run(self) -> Record:
        plane = ControlPlane(self.work / "plane", extra_args=PLANE_ARGS)
        try:
            plane.start()
            env = {}
            if self.arm == "before":
                env["INSTANCE_TYPES_FILE_PATH"] = str(
                    whole_gpu_instance_types(self.work / "instance-types.json", WHOLE_GPUS)
                )
            LivingCluster(plane, consolidation_policy=self.consolidation, consolidate_after="10s",
                          karpenter_env=env).start()  # fmt: skip
            if self.arm != "before":
                plane.apply([overlay_for_pool(OVERLAY, "a100")])
                self.deploy(plane)
            for namespace in {ns for ns, _ in self.day.deployments.values()} | {j.namespace for j in self.day.jobs}:
                plane.namespace(namespace)
            threads = [threading.Thread(target=f, args=(plane,), daemon=True) for f in (self.sample, self.watch)]
            self.record.started = time.monotonic()
            for thread in threads:
                thread.start()
            self.drive(plane)
            self.stop.set()
            for thread in threads:
                thread.join(20)
            self.count_jobs(plane)
            return self.record
        finally:
            self.stop.set()
            plane.stop()

    def deploy(self, plane: ControlPlane) -> None:
        deployed: Deployment = install_kustomize(plane, self.work, POLICIES[self.arm])
        deployed.run("gpupack-webhook")
        deployed.endpoints("gpupack-webhook", "gpupack-webhook")
        wait_until(lambda: deployed.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")
        if self.arm == "gpupack":
            deployed.run("gpupack-scheduler")
            wait_until(lambda: deployed.pods["gpupack-scheduler"].probe("extender") == 200, 60, "extender ready")
            path = "/apis/coordination.k8s.io/v1/namespaces/gpupack-system/leases/gpupack-scheduler"
            wait_until(lambda: (plane.get(path) or {}).get("spec", {}).get("holderIdentity"), 60, "the leader")

    # the day ---------------------------------------------------------------------------------------------------

    def drive(self, plane: ControlPlane) -> None:
        """Every Deployment created at 0 replicas, then the day's scalings and Job creations on time."""
        for name, (namespace, pod) in self.day.deployments.items():
            pod_template = template(written(self.arm, pod))
            pod_template["metadata"]["labels"]["app"] = name
            pod_template["spec"]["terminationGracePeriodSeconds"] = 0
            body = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": pod_template},
            }
            plane.apply([body])
        events: list[tuple[float, Any]] = [(e.minute, e) for e in self.day.scales]
        events += [(j.minute, j) for j in self.day.jobs]
        events.sort(key=lambda item: item[0])
        for minute, event in events:
            delay = minute * self.scale - self.record.now()
            if delay > 0:
                time.sleep(delay)
            if isinstance(event, JobStart):
                self.create_job(plane, event)
            else:
                plane.request(
                    "PATCH",
                    f"/apis/apps/v1/namespaces/{event.namespace}/deployments/{event.name}/scale",
                    {"spec": {"replicas": event.replicas}},
                    "application/merge-patch+json",
                )
        time.sleep(max(0.0, self.day.minutes * self.scale - self.record.now()))

    def create_job(self, plane: ControlPlane, job: JobStart) -> None:
        pod = template(written(self.arm, job.pod))
        pod["spec"]["restartPolicy"] = "Never"
        pod["spec"]["terminationGracePeriodSeconds"] = 0
        pod["metadata"]["annotations"][RUN_FOR] = f"{max(1.0, job.run_minutes * self.scale):.0f}s"
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job.name, "namespace": job.namespace},
            # a Job that checkpoints resumes after a disruption: the Job controller makes a new pod, not counted
            # as a failure (podFailurePolicy on DisruptionTarget)
            "spec": {"backoffLimit": 0, "template": pod, "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
        }  # fmt: skip
        plane.apply([body])
        self.record.jobs_created += 1

    def count_jobs(self, plane: ControlPlane) -> None:
        for namespace in {j.namespace for j in self.day.jobs}:
            for found in plane.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]:
                status = found.get("status", {})
                self.record.jobs_succeeded += bool(status.get("succeeded"))
                self.record.jobs_failed += bool(status.get("failed")) and not status.get("succeeded")

    # measuring -------------------------------------------------------------------------------------------------

    def sample(self, plane: ControlPlane) -> None:
        """Every second: the GPU nodes and what they cost an hour."""
        while not self.stop.wait(1.0):
            try:
                nodes = plane.request("GET", "/api/v1/nodes")["items"]
            except OSError:
                continue
            mine = {
                n["metadata"]["name"]: n["metadata"].get("labels", {})
                for n in nodes
                if NODEPOOL in n["metadata"].get("labels", {})
            }
            cost = sum(
                self.prices.get((labels.get(INSTANCE, ""), labels.get(CAPACITY, "")), 0.0) for labels in mine.values()
            )
            now = self.record.now()
            self.record.nodes.append((now, len(mine), cost))
            by_pool: dict[str, int] = {}
            for name, labels in mine.items():
                pool = self.record.node_pool.setdefault(name, f"{labels[NODEPOOL]}/{labels.get(CAPACITY, '')}")
                by_pool[pool] = by_pool.get(pool, 0) + 1
            self.record.pools.append((now, by_pool))

    def watch(self, plane: ControlPlane) -> None:
        """Every pod's life, from a watch of all pods."""
        kinds = {**{name: "inference" for name in self.day.deployments}, **{j.name: j.kind for j in self.day.jobs}}
        for event in plane.watch("/api/v1/pods", self.stop, timeout=5):
            pod = event["object"]
            meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
            if meta.get("namespace", "").startswith(("kube-", "gpupack-")):
                continue
            owner = meta.get("generateName", "").rstrip("-")
            kind = kinds.get(owner) or kinds.get(owner.rsplit("-", 1)[0], "")
            life = self.record.pods.setdefault(meta["name"], PodLife(self.record.now(), kind))
            if not life.workload:
                life.workload = owner if owner in kinds else owner.rsplit("-", 1)[0]
                limits = [c.get("resources", {}).get("limits", {}) for c in spec.get("containers", [])]
                life.gpu = next((k for found in limits for k in found if k.startswith("nvidia.com/")), "")
            if spec.get("nodeName") and life.bound is None:
                life.bound = self.record.now()
                life.node = spec["nodeName"]
            if status.get("phase") in ("Succeeded", "Failed"):
                life.ended = status["phase"]
            for condition in status.get("conditions", []):
                if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
                    life.disrupted = life.disrupted or condition.get("reason", "DisruptionTarget")
