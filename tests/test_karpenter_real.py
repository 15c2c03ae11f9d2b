"""gpupack deployed as shipped on a living cluster (`gpupack.testing.living_cluster`): Karpenter buys GPU nodes for
the pods gpupack sizes, the extender packs them, Jobs run and finish, consolidation moves Deployment pods, and Karpenter
removes the nodes packing emptied. Developers' workloads carry gpupack's labels only: no GPU request, no
toleration, no affinity, no scheduler.

One cluster for the module. `Story` drives two scenarios at once, one per set of NodePools, while a `Watch` polls
the API every half second and keeps what every test asserts:

- the A100 and T4 pools (`serving`): a wave of inference Deployments (MIG and time-sliced) with a
  PodDisruptionBudget, batch Jobs on spot; then the MIG Deployment grows onto a second A100 node and shrinks, so
  consolidation evicts its pods from the underused node, and the ReplicaSet's new pods go through gpupack again;
- the H100 pool (`training`): two 6-GPU Jobs take two nodes; when the short one ends, a 2-GPU Job goes where the
  extender packs it, next to the long one, and Karpenter removes the emptied node; then a training Job that does
  not checkpoint lands on a third node that consolidation would empty onto the first once a job there ends, which
  its `karpenter.sh/do-not-disrupt` forbids until it has finished.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpupack.testing.control_plane import ControlPlane, forbidden_lines, wait_until
from gpupack.testing.deployed import Deployment, install_kustomize
from gpupack.testing.living_cluster import NODEPOOL, PLANE_ARGS, RUN_FOR, LivingCluster, missing_tools

pytestmark = pytest.mark.timeout(600)
CAPACITY = "karpenter.sh/capacity-type"
W = "gpupack.io/"
DISRUPTED = "DisruptionTarget"
CHAT_MIN = 10
"""The MIG Deployment's PodDisruptionBudget: at least 10 of its 12 replicas available through consolidation."""


# what developers write ----------------------------------------------------------------------------------------------


def template(labels: dict[str, str], run_for: str | None = None, restart: str = "Always") -> dict[str, Any]:
    """A pod template with gpupack's labels and nothing about GPUs (the webhook writes that)."""
    annotations = {RUN_FOR: run_for} if run_for else {}
    return {
        "metadata": {"labels": {**{W + k: v for k, v in labels.items()}}, "annotations": annotations},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/model:1"}],
        },
    }


def deployment(name: str, replicas: int, labels: dict[str, str]) -> dict[str, Any]:
    pod = template(labels)
    pod["metadata"]["labels"]["app"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": pod},
    }


def job(name: str, labels: dict[str, str], run_for: str, completions: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": 0,
            "template": template(labels, run_for, restart="Never"),
        },
    }


# what the API shows, every half second -----------------------------------------------------------------------------


@dataclass
class Seen:
    """One pod as last seen, and what happened to it."""

    labels: dict[str, str]
    annotations: dict[str, str]
    scheduler: str
    owner: str
    node: str | None = None
    phase: str = "Pending"
    disrupted: str | None = None
    """The DisruptionTarget condition's reason, or `deleted` for a pod gone before it finished."""


@dataclass
class Watch:
    """Every pod of `ml` from a watch (each change seen, so an eviction's `DisruptionTarget` is not missed between
    two polls); every half second the nodes with their pool and capacity type, when each went, and the fewest
    ready replicas of `chat` once it first had all of them."""

    plane: ControlPlane
    pods: dict[str, Seen] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    chat_ready_min: int | None = None
    spot_inference: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                self.poll()
            except OSError:
                continue

    def stream(self) -> None:
        for event in self.plane.watch("/api/v1/namespaces/ml/pods", self.stop, timeout=5):
            self.pod_event(event["type"], event["object"])

    def pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
        owner = next((r["kind"] for r in meta.get("ownerReferences", []) if r.get("controller")), "")
        seen = self.pods.setdefault(
            meta["name"],
            Seen(meta.get("labels", {}), meta.get("annotations", {}), spec.get("schedulerName", ""), owner),
        )
        seen.node, seen.phase = spec.get("nodeName") or seen.node, status.get("phase", seen.phase)
        for condition in status.get("conditions", []):
            if condition["type"] == DISRUPTED and condition["status"] == "True":
                seen.disrupted = seen.disrupted or condition.get("reason", DISRUPTED)
        if kind == "DELETED" and seen.phase not in ("Succeeded", "Failed") and seen.disrupted is None:
            seen.disrupted = "deleted"

    def poll(self) -> None:
        nodes = self.plane.request("GET", "/api/v1/nodes")["items"]
        now = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes}
        for name, labels in now.items():
            self.nodes.setdefault(name, {"pool": labels.get(NODEPOOL, ""), "capacity": labels.get(CAPACITY, "")})
        for name in set(self.nodes) - set(now):
            self.gone.setdefault(name, time.monotonic())
        for name, seen in list(self.pods.items()):
            if (
                seen.node
                and seen.labels.get(W + "workload") == "inference"
                and self.nodes.get(seen.node, {}).get("capacity") == "spot"
            ):
                self.spot_inference.append(f"{name} on {seen.node}")
        chat = self.plane.get("/apis/apps/v1/namespaces/ml/deployments/chat")
        if chat is not None:
            ready = chat.get("status", {}).get("readyReplicas", 0)
            if self.chat_ready_min is not None:
                self.chat_ready_min = min(self.chat_ready_min, ready)
            elif ready >= chat["spec"]["replicas"] >= 12:
                self.chat_ready_min = ready

    def of(self, prefix: str) -> dict[str, Seen]:
        return {name: seen for name, seen in self.pods.items() if name.startswith(prefix)}


# the story -----------------------------------------------------------------------------------------------------------


@dataclass
class Story:
    """The two scenarios, run at once; what each found for the tests."""

    cluster: LivingCluster
    watch: Watch
    found: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    """What stopped each scenario (`serving`, `training`) short, if anything."""

    def create(self, obj: dict[str, Any]) -> None:
        self.cluster.plane.apply([obj])

    def succeeded(self, name: str, completions: int = 1, timeout: float = 240) -> None:
        """Once the Job has `completions` succeeded pods; AssertionError naming it when it failed instead."""

        def status() -> dict[str, Any]:
            found: dict[str, Any] = (self.cluster.plane.get(f"/apis/batch/v1/namespaces/ml/jobs/{name}") or {}).get(
                "status", {}
            )
            return found

        ended = wait_until(
            lambda: (s := status()).get("succeeded", 0) >= completions or s.get("failed", 0) > 0,
            timeout,
            f"Job {name} ended",
            every=0.5,
        )
        assert ended and not status().get("failed"), f"Job {name} failed: {status()}"

    def node_of(self, prefix: str, timeout: float = 120) -> str:
        """The node the first pod named `prefix...` is bound to."""
        found: str = wait_until(
            lambda: next((s.node for s in self.watch.of(prefix).values() if s.node), None),
            timeout,
            f"a pod {prefix}* bound",
            every=0.5,
        )
        return found

    def gone(self, node: str, timeout: float = 180) -> float:
        when: float = wait_until(lambda: self.watch.gone.get(node), timeout, f"node {node} removed", every=0.5)
        return when

    def serving(self) -> None:
        """A100 and T4: the wave, then growth and consolidation of the MIG Deployment."""
        self.create(deployment("chat", 12, {"workload": "inference", "gpu-memory": "4Gi"}))
        self.create({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "chat", "namespace": "ml"},
            "spec": {"minAvailable": CHAT_MIN, "selector": {"matchLabels": {"app": "chat"}}},
        })  # fmt: skip
        self.create(deployment("ocr", 4, {"workload": "inference", "latency": "tolerant"}))
        self.create(job("eval", {"workload": "batch"}, "20s", completions=6))
        wait_until(lambda: (self.watch.chat_ready_min or 0) >= 12, 180, "chat's 12 replicas ready", every=0.5)
        self.succeeded("eval", 6)
        self.found["chat_nodes_first"] = self.chat_nodes()
        # Growth onto a second A100 node (20 slices > 16), then back to 12: the ReplicaSet deletes from both
        # nodes, and consolidation finds the underused one's pods a place on the other.
        self.cluster.scale("deployments", "chat", "ml", 20)
        wait_until(lambda: self.ready("chat") >= 20, 180, "chat's 20 replicas ready", every=0.5)
        self.found["chat_nodes_grown"] = self.chat_nodes()
        self.cluster.scale("deployments", "chat", "ml", 12)
        wait_until(lambda: len(self.chat_pods()) == 12, 60, "chat's ReplicaSet down to 12 pods", every=0.5)
        before = self.chat_pods()
        gone = wait_until(
            lambda: next(iter(self.found["chat_nodes_grown"] - set(self.current_nodes())), None),
            240,
            "one of chat's two A100 nodes consolidated away",
            every=0.5,
        )
        self.found["evicted"] = {name for name, pod in before.items() if pod["spec"]["nodeName"] == gone}
        self.found["chat_before"] = set(before)
        wait_until(lambda: self.ready("chat") >= 12, 120, "chat back at 12 ready", every=0.5)
        self.found["chat_after"] = self.chat_pods()
        self.found["chat_nodes_last"] = self.chat_nodes()

    def chat_pods(self) -> dict[str, dict[str, Any]]:
        """chat's running pods, as the API says now."""
        return {
            p["metadata"]["name"]: p
            for p in self.cluster.plane.pods("ml")
            if p["metadata"]["name"].startswith("chat-")
            and p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        }

    def chat_nodes(self) -> set[str]:
        """The nodes chat's running pods are on, as the API says now."""
        return {p["spec"]["nodeName"] for p in self.chat_pods().values()}

    def ready(self, name: str) -> int:
        found = self.cluster.plane.get(f"/apis/apps/v1/namespaces/ml/deployments/{name}") or {}
        return int(found.get("status", {}).get("readyReplicas", 0))

    def current_nodes(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.cluster.plane.request("GET", "/api/v1/nodes")["items"]]

    def training(self) -> None:
        """H100: packing empties a node; do-not-disrupt keeps a training Job's node until the Job is done."""
        checkpointing = {"workload": "training", "checkpoint": "true"}
        self.create(job("long", {**checkpointing, "gpus": "6"}, "240s"))
        # its team guards it with a budget, so consolidation never moves it: the node it holds stays the one the
        # others could be packed onto
        self.create({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "long", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"job-name": "long"}}},
        })  # fmt: skip
        self.create(job("short", {**checkpointing, "gpus": "6"}, "15s"))
        long_node, short_node = self.node_of("long-"), self.node_of("short-")
        self.succeeded("short")
        # `small` outlives Karpenter's removal of the short Job's node (up to a minute or two on a busy machine), so
        # `plain` below still finds the long Job's node full
        self.create(job("small", {**checkpointing, "gpus": "2"}, "120s"))
        self.found["packing"] = (long_node, short_node, self.node_of("small-"))
        self.gone(short_node)
        self.found["short_node_gone"] = True
        # The long Job's node is full: the training Job that does not checkpoint gets a third node. Once `small`
        # ends, it would fit next to `long`.
        self.create(job("plain", {"workload": "training", "gpus": "2"}, "70s"))
        plain_node = self.node_of("plain-")
        self.succeeded("small")
        small_done = time.monotonic()
        self.succeeded("plain")
        plain_done = time.monotonic()
        removed = self.gone(plain_node)
        self.found["plain"] = (long_node, plain_node, small_done, plain_done, removed)
        self.succeeded("long")

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._guarded, args=(name, part))
            for name, part in (("serving", self.serving), ("training", self.training))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(540)

    def _guarded(self, name: str, part: Callable[[], None]) -> None:
        try:
            part()
        except BaseException as exc:  # reported by the tests that need what it did not find
            self.errors[name] = exc


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    if (reason := missing_tools()) is not None:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("karpenter")
    plane = ControlPlane(work / "plane", extra_args=PLANE_ARGS)
    try:
        plane.start()
        cluster = LivingCluster(plane).start()
        deployed = install_kustomize(plane, work, "mode: enforce\n")
        plane.namespace("ml")
        run_gpupack(plane, deployed)
        watch = Watch(plane)
        watchers = [threading.Thread(target=f, daemon=True) for f in (watch.run, watch.stream)]
        for watcher in watchers:
            watcher.start()
        told = Story(cluster, watch)
        told.run()
        watch.stop.set()
        for watcher in watchers:
            watcher.join(20)
        watch.poll()
        yield told
        refused = {n: forbidden_lines(t) for n, t in plane.logs().items() if n != "kube-apiserver"}
        assert all(not lines for lines in refused.values()), refused
    finally:
        plane.stop()


def run_gpupack(plane: ControlPlane, deployed: Deployment) -> None:
    """The webhook and the scheduler with its extender, as their Deployments run them; the scheduler's Lease."""
    deployed.run("gpupack-webhook")
    deployed.endpoints("gpupack-webhook", "gpupack-webhook")
    deployed.run("gpupack-scheduler")
    wait_until(lambda: deployed.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")
    wait_until(lambda: deployed.pods["gpupack-scheduler"].probe("extender") == 200, 60, "extender ready")
    path = "/apis/coordination.k8s.io/v1/namespaces/gpupack-system/leases/gpupack-scheduler"
    wait_until(lambda: (plane.get(path) or {}).get("spec", {}).get("holderIdentity"), 60, "the leader")


def completed(story: Story, *parts: str) -> None:
    """The scenarios a test reads ran to their end."""
    stopped = {name: story.errors[name] for name in parts if name in story.errors}
    assert not stopped, stopped


# the tests -----------------------------------------------------------------------------------------------------------


def test_every_labelled_pod_went_through_gpupack_and_every_job_completed(story: Story) -> None:
    completed(story, "serving", "training")
    for name, seen in story.watch.pods.items():
        assert seen.scheduler == "gpupack-scheduler", name
        assert seen.annotations.get(W + "class") in ("inference", "training", "batch"), name
    jobs = {
        j["metadata"]["name"]: j["status"]
        for j in story.cluster.plane.request("GET", "/apis/batch/v1/namespaces/ml/jobs")["items"]
    }
    assert {name: status.get("succeeded", 0) for name, status in jobs.items()} == {
        "eval": 6, "long": 1, "short": 1, "small": 1, "plain": 1,
    }  # fmt: skip
    assert all(not status.get("failed") for status in jobs.values()), jobs


def test_karpenter_bought_a_node_of_each_model_the_pods_were_sized_for(story: Story) -> None:
    completed(story, "serving", "training")
    pools = {seen.node and story.watch.nodes.get(seen.node, {}).get("pool") for seen in story.watch.pods.values()}
    assert {"a100", "h100", "t4"} <= pools
    assert len(story.found["chat_nodes_first"]) == 1  # 12 MIG slices packed on one 16-slice A100


def test_the_extender_packs_the_new_job_next_to_the_running_one_and_karpenter_removes_the_emptied_node(
    story: Story,
) -> None:
    assert "packing" in story.found, story.errors
    long_node, short_node, small_node = story.found["packing"]
    assert long_node != short_node
    # kube-scheduler alone scores the emptied node highest (LeastAllocated); the extender keeps it empty
    assert small_node == long_node
    assert story.found.get("short_node_gone"), story.errors


def test_no_training_pod_that_does_not_checkpoint_is_ever_disrupted(story: Story) -> None:
    plain = story.watch.of("plain-")
    assert plain, story.errors
    disrupted = {
        name: (seen.disrupted, seen.node)
        for name, seen in story.watch.pods.items()
        if seen.labels.get(W + "workload") == "training"
        and seen.labels.get(W + "checkpoint") != "true"
        and seen.disrupted is not None
    }
    assert not disrupted, f"training pods that do not checkpoint were disrupted: {disrupted}"
    assert next(iter(plain.values())).annotations.get("karpenter.sh/do-not-disrupt") == "true"
    completed(story, "training")
    long_node, plain_node, small_done, plain_done, removed = story.found["plain"]
    assert plain_node != long_node and len(plain) == 1
    # its node could have gone once `small` ended (its pod fitted next to `long`); it went only after the Job
    assert removed > plain_done > small_done


def test_training_that_does_not_checkpoint_runs_on_demand_though_its_pool_offers_spot(story: Story) -> None:
    """Only labels on the Job (`workload: training`, no `checkpoint`): the webhook keeps it off spot
    (`spotNeedsCheckpoint`), so Karpenter buys an on-demand H100 where spot is cheaper and on offer."""
    plain = [seen for seen in story.watch.of("plain-").values() if seen.node]
    assert plain, story.errors
    assert {story.watch.nodes[seen.node]["capacity"] for seen in plain} == {"on-demand"}


def test_no_inference_pod_ever_runs_on_spot(story: Story) -> None:
    assert story.watch.spot_inference == []
    batch = [s for s in story.watch.pods.values() if s.labels.get(W + "workload") == "batch"]
    assert batch and all(story.watch.nodes[s.node]["capacity"] == "spot" for s in batch if s.node)


def test_a_deployment_keeps_its_disruption_budget_through_consolidation(story: Story) -> None:
    completed(story, "serving")
    assert len(story.found["chat_nodes_grown"]) == 2 and len(story.found["chat_nodes_last"]) == 1
    assert story.watch.chat_ready_min is not None and story.watch.chat_ready_min >= CHAT_MIN


def test_evicted_pods_are_recreated_by_their_controllers_and_scheduled_through_gpupack_again(story: Story) -> None:
    completed(story, "serving")
    evicted, before, after = story.found["evicted"], story.found["chat_before"], story.found["chat_after"]
    assert evicted, "consolidation evicted no chat pod"
    assert not evicted & set(after)  # gone, all of them
    assert len(after) == 12 and len({p["spec"]["nodeName"] for p in after.values()}) == 1
    # the ReplicaSet made a pod for each evicted one; each went through the webhook and gpupack's scheduler
    recreated = [pod for name, pod in after.items() if name not in before]
    assert len(recreated) == len(evicted)
    assert all(
        p["spec"]["schedulerName"] == "gpupack-scheduler"
        and p["metadata"]["annotations"].get(W + "class") == "inference"
        for p in recreated
    )
