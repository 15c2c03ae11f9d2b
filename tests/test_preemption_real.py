"""Preemption on a real control plane, deployed as shipped: kube-scheduler's dry run, the extender's preempt verb,
the victims deleted and the preemptors bound. One cluster per scenario.

GPU utilization comes from a real Prometheus scraping, every second, an exporter that writes the DCGM exporter's
text (`gpupack.testing.dcgm`: the real exporter needs GPUs). Victims are pods bound at creation (`spec.nodeName`)
and started (`status.startTime`, which kube-scheduler reads to choose among equal victims), and the kubelet
stand-in removes the pods kube-scheduler deletes.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpupack.testing.control_plane import ControlPlane, Kubelet, forbidden_lines, wait_until
from gpupack.testing.dcgm import Gpu, MigGpu, MigInstance, Node, exposition
from gpupack.testing.deployed import Deployment, install_kustomize
from gpupack.testing.history import PROMETHEUS, PrometheusServer

pytestmark = pytest.mark.timeout(600)
NS = "ml"
A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.strategy": "mixed",
}
A100_MIG = {"nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
T4 = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"}
M1G = "nvidia.com/mig-1g.5gb"
SHARED = "nvidia.com/gpu.shared"
PROMETHEUS_SERVICE = "http://prometheus-operated.monitoring.svc:9090"


class Exporter:
    """An HTTP `/metrics` that writes the DCGM exporter's text for the nodes it is given (changed at will)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition(outer.nodes).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def mig_gpus(activity: float) -> list[Gpu | MigGpu]:
    """Eight A100s in `all-balanced`, every instance at `activity`."""
    layout = [("1g.5gb", 1), ("1g.5gb", 2), ("2g.10gb", 3), ("3g.20gb", 4)]
    return [MigGpu([MigInstance(p, i, activity) for p, i in layout]) for _ in range(8)]


@dataclass
class Cluster:
    plane: ControlPlane
    deployment: Deployment
    exporter: Exporter
    prometheus: str
    created: dict[str, str] = field(default_factory=dict)
    """Victim name -> node it was bound to."""

    def start(self, nodes: dict[str, tuple[dict[str, str], dict[str, str], Node | None]]) -> None:
        """The nodes (allocatable, labels, what their exporter writes), then gpupack's pods (the webhook reads the
        nodes' MIG profiles when it starts), the leader and the live data."""
        for name, (allocatable, labels, _) in nodes.items():
            self.plane.node(name, {"cpu": "96", "memory": "1000Gi", **allocatable}, labels)
        self.exporter.nodes = [exported for _, _, exported in nodes.values() if exported is not None]
        deployment = self.deployment
        deployment.run("gpupack-webhook")
        deployment.endpoints("gpupack-webhook", "gpupack-webhook")
        deployment.run("gpupack-scheduler", services={PROMETHEUS_SERVICE: self.prometheus})
        wait_until(lambda: deployment.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")
        wait_until(lambda: deployment.pods["gpupack-scheduler"].probe("extender") == 200, 60, "extender ready")
        path = "/apis/coordination.k8s.io/v1/namespaces/gpupack-system/leases/gpupack-scheduler"
        wait_until(lambda: (self.plane.get(path) or {}).get("spec", {}).get("holderIdentity"), 60, "the leader")
        live_data(self, [n.name for n in self.exporter.nodes])

    def victim(
        self,
        name: str,
        node: str,
        labels: dict[str, str],
        resource: str,
        started: datetime.datetime,
        app: str | None = None,
        priority_class: str | None = None,
    ) -> None:
        """A pod already running on `node`: created bound, then started (as a kubelet reports it). With
        `priority_class`, the API server resolves its priority from that PriorityClass."""
        found = {f"gpupack.io/{k}": v for k, v in labels.items()} | ({"app": app} if app else {})
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": found},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.example/job:1",
                                "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}}}],
            },
        }  # fmt: skip
        if priority_class is not None:
            body["spec"]["priorityClassName"] = priority_class
        self.plane.apply([body])
        stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "status": {"phase": "Running", "startTime": stamp, "conditions": [{"type": "Ready", "status": "True"}]}
        }
        self.plane.request(
            "PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", status, "application/strategic-merge-patch+json"
        )
        self.created[name] = node

    def preemptor(self, name: str, labels: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {f"gpupack.io/{k}": v for k, v in labels.items()}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/model:1"}]},
        }
        self.plane.apply([body])

    def deleted(self) -> dict[str, str]:
        """The victims gone, and the node each was on."""
        alive = {p["metadata"]["name"] for p in self.plane.pods(NS)}
        return {name: node for name, node in self.created.items() if name not in alive}

    def extender_stats(self) -> str:
        return self.deployment.pods["gpupack-scheduler"].processes["extender"].text()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if not Path(PROMETHEUS).exists():
        pytest.skip("no prometheus (`make test` installs Debian's)")
    exporter = Exporter()
    prometheus = PrometheusServer(tmp_path / "tsdb", oldest=time.time(), retention_days=1, scrape=[exporter.address])
    plane = ControlPlane(tmp_path / "plane")
    try:
        plane.start()
        prometheus.wait_ready()
        deployment = install_kustomize(plane, tmp_path, "mode: enforce\n")
        plane.namespace(NS)
        with Kubelet(plane):
            yield Cluster(plane, deployment, exporter, prometheus.url)
        refused = {n: forbidden_lines(t) for n, t in plane.logs().items() if n != "kube-apiserver"}
        assert all(not lines for lines in refused.values()), refused
    finally:
        plane.stop()
        prometheus.stop()
        exporter.close()


def live_data(cluster: Cluster, nodes: list[str]) -> None:
    """Until the extender reads fresh GPU data for every one of `nodes` (its /state says so)."""
    import json
    import urllib.request

    port = cluster.deployment.pods["gpupack-scheduler"].ports["8888"]

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5) as answer:
            state = json.loads(answer.read())["nodes"]
        return all(
            (gpus := state.get(n, {}).get("utilization")) and all(g["fresh"] for g in gpus.values()) for n in nodes
        )

    wait_until(ready, 90, f"live GPU data for {nodes}")


NOW = datetime.datetime.now(datetime.UTC)
CRITICAL = {"workload": "inference", "gpu-memory": "4Gi"}


def test_a_hot_node_loses_no_pod_and_the_victims_all_fall_where_the_preemptors_go(cluster: Cluster) -> None:
    # The case: `hot` is full of batch pods whose MIG instances run at 95 %, `cool` full of training pods
    # at 50 %. Three latency-critical inference pods need a 1g.5gb each. kube-scheduler would preempt the batch
    # pods first (lowest priority), but the extender refuses the hot node: 3 training victims on `cool`, none on
    # `hot`, and the three pods land on `cool`.
    plane = cluster.plane
    cluster.start({
        "hot": (A100_MIG, A100, Node("hot", mig_gpus(0.95), model="NVIDIA A100-SXM4-40GB")),
        "cool": (A100_MIG, A100, Node("cool", mig_gpus(0.5), model="NVIDIA A100-SXM4-40GB")),
    })  # fmt: skip
    for i in range(16):
        cluster.victim(f"sweep-{i}", "hot", {"workload": "batch"}, M1G, NOW - datetime.timedelta(hours=1))
        cluster.victim(f"train-{i}", "cool", {"workload": "training"}, M1G, NOW - datetime.timedelta(hours=1))
    for i in range(3):
        cluster.preemptor(f"chat-{i}", CRITICAL)
    bound = [plane.scheduled(NS, f"chat-{i}", 120) for i in range(3)]
    assert {p["spec"]["nodeName"] for p in bound} == {"cool"}
    gone = cluster.deleted()
    assert len(gone) == 3 and set(gone.values()) == {"cool"}, gone


def test_mig_and_time_sliced_preemption_kill_one_victim_each_where_the_preemptor_goes(cluster: Cluster) -> None:
    # Two MIG nodes full of batch pods, `mig-hot` at 95 % with the later victims (kube-scheduler alone picks it,
    # its last rule being the latest start), `mig-cool` at 30 %; two time-sliced T4 nodes full of time-sliced
    # training, `t4-plain` (no checkpoints, later) and `t4-ckpt` (checkpoints). A latency-critical 1g.5gb pod and a
    # latency-tolerant time-sliced pod: one victim each, on `mig-cool` and `t4-ckpt`, where the pods land. Without
    # the verb a batch pod dies on the hot node for nothing, and the non-checkpointing job loses its whole run.
    plane = cluster.plane
    t4 = {**T4, "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    a100 = "NVIDIA A100-SXM4-40GB"
    cluster.start({
        "mig-hot": (A100_MIG, A100, Node("mig-hot", mig_gpus(0.95), model=a100)),
        "mig-cool": (A100_MIG, A100, Node("mig-cool", mig_gpus(0.3), model=a100)),
        "t4-plain": ({SHARED: "16"}, t4, Node("t4-plain", [Gpu(30.0) for _ in range(4)], model="Tesla T4")),
        "t4-ckpt": ({SHARED: "16"}, t4, Node("t4-ckpt", [Gpu(30.0) for _ in range(4)], model="Tesla T4")),
    })  # fmt: skip
    early, late = NOW - datetime.timedelta(hours=3), NOW - datetime.timedelta(hours=1)
    sliced = {"workload": "training", "sharing": "time-slicing"}
    for i in range(16):
        cluster.victim(f"hot-batch-{i}", "mig-hot", {"workload": "batch"}, M1G, late)
        cluster.victim(f"cool-batch-{i}", "mig-cool", {"workload": "batch"}, M1G, early)
        cluster.victim(f"plain-train-{i}", "t4-plain", sliced, SHARED, late)
        cluster.victim(f"ckpt-train-{i}", "t4-ckpt", {**sliced, "checkpoint": "true"}, SHARED, early)
    cluster.preemptor("embed", CRITICAL)
    cluster.preemptor("ocr", {"workload": "inference", "latency": "tolerant"})
    assert plane.scheduled(NS, "embed", 120)["spec"]["nodeName"] == "mig-cool"
    assert plane.scheduled(NS, "ocr", 120)["spec"]["nodeName"] == "t4-ckpt"
    gone = cluster.deleted()
    assert sorted(gone.values()) == ["mig-cool", "t4-ckpt"], gone


def test_a_hot_node_with_room_is_unresolvable_so_kube_scheduler_does_not_preempt_there(cluster: Cluster) -> None:
    # `hot` has free 1g.5gb instances (kube-scheduler's own filters pass it) but every GPU at 95 %: the extender
    # refuses it for latency-critical inference as FailedAndUnresolvable, and kube-scheduler says preemption is
    # not helpful there instead of looking for victims. The pod waits; no batch pod dies.
    plane = cluster.plane
    cluster.start({"hot": (A100_MIG, A100, Node("hot", mig_gpus(0.95), model="NVIDIA A100-SXM4-40GB"))})
    for i in range(8):
        cluster.victim(f"sweep-{i}", "hot", {"workload": "batch"}, M1G, NOW - datetime.timedelta(hours=1))
    cluster.preemptor("chat", CRITICAL)

    def failed_scheduling() -> str:
        found = [e for e in plane.events(NS) if e["involvedObject"]["name"] == "chat"]
        return " ".join(e.get("message", "") for e in found if e.get("reason") == "FailedScheduling")

    message = wait_until(failed_scheduling, 60, "a FailedScheduling event for chat")
    assert "every GPU is above the hot threshold 85 pct (coolest at 95 pct)" in message, message
    assert "%!" not in message, message  # a "%" in a reason is a format verb to kube-scheduler
    assert "Preemption is not helpful for scheduling" in message, message
    time.sleep(3)  # a retry or two later: still nothing deleted, the pod still pending
    pending = plane.pod(NS, "chat")
    assert cluster.deleted() == {} and pending is not None and not pending["spec"].get("nodeName")


def test_preemption_takes_the_lower_priority_pods_though_no_victim_has_a_gpupack_label(cluster: Cluster) -> None:
    # Issue 27: pods of another team, without gpupack labels, at the shipped batch priority (-100) on `a100-a` and
    # the training priority (10000) on `a100-b`, every GPU cool. Three latency-critical inference pods (100000)
    # arrive. kube-scheduler alone takes three batch pods; the verb once ranked every victim "other" and preferred
    # the node with fewer victims (a pod nominated to `a100-a` makes its dry run ask two there), killing training
    # pods while batch pods ran. Priority comes first: only `a100-a`'s pods die.
    plane = cluster.plane
    cluster.start({
        "a100-a": (A100_MIG, A100, Node("a100-a", mig_gpus(0.3), model="NVIDIA A100-SXM4-40GB")),
        "a100-b": (A100_MIG, A100, Node("a100-b", mig_gpus(0.3), model="NVIDIA A100-SXM4-40GB")),
    })  # fmt: skip
    started = NOW - datetime.timedelta(hours=1)
    for i in range(16):
        cluster.victim(f"sweep-a-{i}", "a100-a", {}, M1G, started, priority_class="gpupack-batch")
        cluster.victim(f"train-b-{i}", "a100-b", {}, M1G, started, priority_class="gpupack-training")
    priorities = {p["metadata"]["name"]: p["spec"].get("priority") for p in plane.pods(NS)}
    assert {priorities["sweep-a-0"], priorities["train-b-0"]} == {-100, 10_000}, priorities
    for i in range(3):
        cluster.preemptor(f"chat-{i}", CRITICAL)
    bound = [plane.scheduled(NS, f"chat-{i}", 120) for i in range(3)]
    assert {p["spec"]["priority"] for p in bound} == {100_000}
    assert {p["spec"]["nodeName"] for p in bound} == {"a100-a"}
    time.sleep(3)  # a retry or two later: no training pod has died for them
    gone = cluster.deleted()
    assert len(gone) == 3 and set(gone.values()) == {"a100-a"}, gone


def test_checkpointing_training_is_preempted_before_training_that_does_not_checkpoint(cluster: Cluster) -> None:
    # Two H100 nodes full of training pods of the same priority; on `plain` they do not checkpoint and started
    # later, so kube-scheduler alone picks `plain` (its last rule: the latest start time). The extender keeps only
    # `ckpt`: the checkpointing job loses minutes, the other its whole run.
    plane = cluster.plane
    cluster.start({
        "ckpt": ({"nvidia.com/gpu": "8"}, H100, Node("ckpt", [Gpu(60.0) for _ in range(8)])),
        "plain": ({"nvidia.com/gpu": "8"}, H100, Node("plain", [Gpu(60.0) for _ in range(8)])),
    })  # fmt: skip
    for i in range(8):
        cluster.victim(f"ckpt-{i}", "ckpt", {"workload": "training", "checkpoint": "true"}, "nvidia.com/gpu",
                       NOW - datetime.timedelta(hours=3))  # fmt: skip
        cluster.victim(
            f"plain-{i}", "plain", {"workload": "training"}, "nvidia.com/gpu", NOW - datetime.timedelta(hours=1)
        )
    cluster.preemptor("llm", {"workload": "inference", "sharing": "exclusive", "latency": "tolerant"})
    assert plane.scheduled(NS, "llm", 120)["spec"]["nodeName"] == "ckpt"
    gone = cluster.deleted()
    assert len(gone) == 1 and set(gone.values()) == {"ckpt"}, gone


def test_a_pod_disruption_budget_is_kept_when_another_candidate_exists(cluster: Cluster) -> None:
    # Two H100 nodes full of batch pods; a PodDisruptionBudget guards the pods of `guarded`, which started later
    # (kube-scheduler's last rule would pick that node). Without a disruption controller the budget's status
    # allows no disruption, so evicting one of them violates it: the victim is on `free`.
    plane = cluster.plane
    cluster.start({
        "guarded": ({"nvidia.com/gpu": "8"}, H100, Node("guarded", [Gpu(60.0) for _ in range(8)])),
        "free": ({"nvidia.com/gpu": "8"}, H100, Node("free", [Gpu(60.0) for _ in range(8)])),
    })  # fmt: skip
    for i in range(8):
        cluster.victim(f"guarded-{i}", "guarded", {"workload": "batch"}, "nvidia.com/gpu", NOW, app="guarded")
        cluster.victim(f"free-{i}", "free", {"workload": "batch"}, "nvidia.com/gpu", NOW - datetime.timedelta(hours=2))
    plane.apply([{
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded", "namespace": NS},
        "spec": {"minAvailable": 8, "selector": {"matchLabels": {"app": "guarded"}}},
    }])  # fmt: skip
    cluster.preemptor("llm", {"workload": "inference", "sharing": "exclusive", "latency": "tolerant"})
    assert plane.scheduled(NS, "llm", 120)["spec"]["nodeName"] == "free"
    gone = cluster.deleted()
    assert len(gone) == 1 and set(gone.values()) == {"free"}, gone


def test_preemption_still_works_with_the_extender_killed(cluster: Cluster) -> None:
    # `ignorable: true`: kube-scheduler skips the extender that does not answer, for the preempt verb too.
    plane = cluster.plane
    cluster.start({"h": ({"nvidia.com/gpu": "8"}, H100, Node("h", [Gpu(60.0) for _ in range(8)]))})
    for i in range(8):
        cluster.victim(f"sweep-{i}", "h", {"workload": "batch"}, "nvidia.com/gpu", NOW)
    cluster.deployment.stop("gpupack-scheduler", "extender")
    cluster.preemptor("llm", {"workload": "inference", "sharing": "exclusive", "latency": "tolerant"})
    assert plane.scheduled(NS, "llm", 120)["spec"]["nodeName"] == "h"
    assert len(cluster.deleted()) == 1
