"""The demo's last step, the guide's (docs/method.md) first: measure. A week of the embedded cluster as the guide's own
command would have logged it on each node, and the cluster's objects as `kubectl get nodes,pods,pdb -A -o json` prints
them, for `gpupack report` to read offline (no Prometheus, no cluster).

    nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total --format=csv -l 300

(`-l 300`, one row per GPU every 5 minutes, keeps the week small; the guide's `-l 5` reads the same.) The week is
drawn from the pods below, each adding its utilization to the GPUs it holds, inference following a daily curve,
with a fixed seed: every run writes the same numbers, ending at the minute the demo runs. The nodes are the demo's
(`gpupack.demo.cluster.NODES`), and among them are what the report looks for: an idle node with a workload holding whole
GPUs it barely uses, which its PodDisruptionBudget keeps from being removed; an idle node a bare pod keeps; a hot
training node; an underused spot node running inference; a time-sliced T4 whose memory is held by an idle pod;
MIG nodes, which nvidia-smi cannot measure (`[N/A]`); and empty nodes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupack.core.objects import GFD_COUNT
from gpupack.demo.cluster import NODES, SPOT

if TYPE_CHECKING:  # the report extra: imported where the demo runs the report
    from gpupack.report.document import Report

STEP_SECONDS = 300
WEEK_SECONDS = 7 * 24 * 3600
SEED = 7
TEMPLATE_HASH = "5d8f7b"
HEADER = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
GPU_NAMES = {"a100": "NVIDIA A100-SXM4-40GB", "h100": "NVIDIA H100 80GB HBM3", "t4": "Tesla T4"}
GPU_MEMORY_MIB = {"a100": 40960, "h100": 81559, "t4": 15360}


@dataclass(frozen=True, slots=True)
class WeekPod:
    """A pod that ran all week: what it holds and how it used it."""

    name: str
    node: str
    gpus: tuple[int, ...]
    """The GPU indexes it holds (a time-sliced replica or a MIG instance: the GPU it is on)."""
    resource: str
    count: int
    util: float
    """Percent it adds to each of its GPUs' utilization at its daily peak (jobs: all the time)."""
    fb_mib: float
    """Framebuffer it holds on each of its GPUs."""
    owner: str = "Deployment"
    """Deployment, Job or "" (a bare pod)."""
    labels: dict[str, str] = field(default_factory=dict)
    spot: bool = False
    """Tolerates the spot taint."""

    @property
    def daily(self) -> bool:
        """Serving follows the day; jobs run flat out."""
        return self.owner == "Deployment"


POOL = "ml-serving"
WEEK: tuple[WeekPod, ...] = (
    # a100-mig-1: the demo's running MIG pods; nvidia-smi reads no utilization in MIG mode
    WeekPod("chat-api-0", "a100-mig-1", (0,), "nvidia.com/mig-2g.10gb", 1, 45.0, 8200.0),
    WeekPod("chat-api-1", "a100-mig-1", (1,), "nvidia.com/mig-2g.10gb", 1, 40.0, 8100.0),
    WeekPod("embed-0", "a100-mig-1", (0,), "nvidia.com/mig-1g.5gb", 1, 30.0, 3900.0),
    # h100-od-1: training flat out, hot
    WeekPod("pretrain-0", "h100-od-1", (0, 1, 2, 3), "nvidia.com/gpu", 4, 92.0, 71000.0, "Job"),
    WeekPod("finetune-0", "h100-od-1", (4, 5, 6, 7), "nvidia.com/gpu", 4, 88.0, 64000.0, "Job"),
    # h100-od-2: idle; llm-serve holds whole H100s at a few percent and 6 GB, its PDB keeps the node
    WeekPod("llm-serve-0", "h100-od-2", (0,), "nvidia.com/gpu", 1, 9.0, 6100.0),
    WeekPod("llm-serve-1", "h100-od-2", (1,), "nvidia.com/gpu", 1, 8.0, 5900.0),
    # h100-spot-2: idle, but a bare notebook pod keeps it
    WeekPod("notebook-ana", "h100-spot-2", (0,), "nvidia.com/gpu", 1, 2.0, 2100.0, "", spot=True),
    # h100-spot-1: underused; a checkpointing training job and an inference canary on spot
    WeekPod(
        "sweep-0",
        "h100-spot-1",
        (0, 1, 2, 3),
        "nvidia.com/gpu",
        4,
        35.0,
        30000.0,
        "Job",
        {"gpupack.io/workload": "training", "gpupack.io/checkpoint": "true"},
        spot=True,
    ),
    WeekPod("chat-canary-0", "h100-spot-1", (4,), "nvidia.com/gpu", 1, 30.0, 20000.0, spot=True),
    # t4-ts-1: the demo's time-sliced OCR replicas, unlabelled
    WeekPod("ocr-0", "t4-ts-1", (0,), "nvidia.com/gpu.shared", 1, 15.0, 1800.0),
    WeekPod("ocr-1", "t4-ts-1", (0,), "nvidia.com/gpu.shared", 1, 12.0, 1700.0),
    WeekPod("ocr-2", "t4-ts-1", (1,), "nvidia.com/gpu.shared", 1, 10.0, 1700.0),
    # t4-ts-2: a translation replica holding a T4's memory at 1 %, beside busy batch
    WeekPod("translate-0", "t4-ts-2", (0,), "nvidia.com/gpu.shared", 1, 1.0, 14500.0),
    *(WeekPod(f"thumbs-{i}", "t4-ts-2", (i,), "nvidia.com/gpu.shared", 1, 65.0, 4000.0, "Job") for i in (1, 2)),
    # t4-ts-3: serving at a healthy level
    *(
        WeekPod(
            f"asr-{i}",
            "t4-ts-3",
            (i % 4,),
            "nvidia.com/gpu.shared",
            1,
            33.0,
            3000.0,
            labels={"gpupack.io/workload": "inference", "gpupack.io/latency": "tolerant"},
        )
        for i in range(8)
    ),
)
"""The pods of the week; every other node (a100-mig-2, a100-mig-3, t4-spot-1) stands empty."""


def _family(node: dict[str, Any]) -> str:
    return str(node["metadata"]["name"]).split("-", 1)[0]


def _gpu_count(node: dict[str, Any]) -> int:
    return int(node["metadata"]["labels"][GFD_COUNT])


def daily(t: float) -> float:
    """Serving's share of its peak at `t` (UTC): 1 at 15:00, 0.3 at 03:00."""
    hour = (t % 86400) / 3600
    return 0.65 + 0.35 * math.cos(2 * math.pi * (hour - 15) / 24)


def write_logs(directory: Path, end: float) -> list[Path]:
    """One nvidia-smi CSV per node, `NODE.csv`, covering the week up to `end`; returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    stamps = np.arange(end - WEEK_SECONDS, end, STEP_SECONDS)  # each row stands for the 5 minutes after it
    curve = np.array([daily(float(t)) for t in stamps])
    text = [datetime.fromtimestamp(float(t), UTC).strftime("%Y/%m/%d %H:%M:%S.000") for t in stamps]
    files = []
    for node in NODES:
        name = node["metadata"]["name"]
        family = _family(node)
        count = _gpu_count(node)
        util = np.zeros((count, len(stamps)))
        memory = np.zeros(count)
        for pod in (p for p in WEEK if p.node == name):
            for index in pod.gpus:
                util[index] += pod.util * (curve if pod.daily else 1.0)
                memory[index] += pod.fb_mib
        util = np.clip(util + rng.normal(0, 1.5, util.shape) * (util > 0), 0, 100).round()
        mig = family == "a100"
        lines = [HEADER]
        for step, stamp in enumerate(text):
            for index in range(count):
                shown = "[N/A]" if mig else f"{int(util[index, step])} %"
                used = int(memory[index]) + (0 if memory[index] else 1)
                lines.append(
                    f"{stamp}, {index}, {GPU_NAMES[family]}, {shown}, {used} MiB, {GPU_MEMORY_MIB[family]} MiB\n"
                )
        path = directory / f"{name}.csv"
        path.write_text("".join(lines), encoding="utf-8")
        files.append(path)
    return files


def pod_object(pod: WeekPod, created: float) -> dict[str, Any]:
    """The pod as the API returns it: bound, running, owned by its controller."""
    metadata: dict[str, Any] = {
        "name": pod.name
        if pod.owner != "Deployment"
        else f"{pod.name.rsplit('-', 1)[0]}-{TEMPLATE_HASH}-{pod.name.rsplit('-', 1)[1]}",
        "namespace": POOL,
        "labels": dict(pod.labels),
        "uid": f"demo-week-{pod.name}",
        "creationTimestamp": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    base = pod.name.rsplit("-", 1)[0]
    if pod.owner == "Deployment":
        metadata["labels"].update({"app": base, "pod-template-hash": TEMPLATE_HASH})
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{base}-{TEMPLATE_HASH}"}
        metadata["ownerReferences"] = [{**owner, "uid": f"demo-rs-{base}", "controller": True}]
    elif pod.owner == "Job":
        metadata["labels"]["job-name"] = pod.name
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": pod.name,
                "uid": f"demo-job-{pod.name}",
                "controller": True,
            }
        ]
    gpu = {pod.resource: str(pod.count)}
    spec: dict[str, Any] = {
        "nodeName": pod.node,
        "schedulerName": "default-scheduler",
        "priority": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "2", "memory": "8Gi", **gpu}, "limits": gpu},
            }
        ],
    }
    if pod.spot:
        spec["tolerations"] = [
            {"key": SPOT["key"], "operator": "Equal", "value": SPOT["value"], "effect": "NoSchedule"}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


def cluster_objects(end: float) -> dict[str, Any]:
    """Nodes, pods and a PodDisruptionBudget as `kubectl get nodes,pods,pdb -A -o json` prints them at `end`."""
    pods = [pod_object(p, end - WEEK_SECONDS - 3600) for p in WEEK]
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llm-serve", "namespace": POOL},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "llm-serve"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2},
    }
    return {"apiVersion": "v1", "kind": "List", "items": [*NODES, *pods, pdb]}


def write_week(directory: Path, end: float) -> tuple[list[Path], Path]:
    """The logs and the cluster file; returns (logs, cluster file)."""
    logs = write_logs(directory, end)
    cluster = directory / "cluster.json"
    cluster.write_text(json.dumps(cluster_objects(end), indent=1), encoding="utf-8")
    return logs, cluster


def report_week(workdir: Path, end: float, prices: Path | None = None) -> None:
    """Write the week under `workdir/week`, run `gpupack report` on it (priced with `prices` when given: printed,
    and the page beside it), and say how to run it again."""
    import argparse

    from rich.console import Console

    from gpupack.report.cli import add_arguments, report
    from gpupack.report.render_html import render_html
    from gpupack.report.render_text import render

    logs, cluster = write_week(workdir / "week", end)
    page = workdir / "report.html"
    parser = argparse.ArgumentParser(prog="gpupack report")
    add_arguments(parser)
    priced = ["--prices", str(prices)] if prices is not None else []
    made = report(parser.parse_args(["--nvidia-smi", *map(str, logs), "--cluster", str(cluster), *priced]))
    console = Console()
    render(made, console if console.is_terminal else Console(width=150))  # piped (CI logs): room for the tables
    page.write_text(render_html(made), encoding="utf-8")

    again = f"gpupack report --nvidia-smi {logs[0].parent}/*.csv --cluster {cluster}" + "".join(
        f" {arg}" for arg in priced
    )
    print(f"\nthe same report as a page: {page} (open it in a browser); again, or as JSON: {again} [--json]")
    closing = week_in_money(made)
    if closing:
        print(f"\n{closing}")


def week_in_money(made: Report) -> str | None:
    """The demo's last word, when the report was priced: what the week's idle GPU capacity cost and what the
    nodes packing empties bill in a week, with the prices file's note (`make run`'s are example prices)."""
    from gpupack.report.present import money

    summary, savings = made.summary, made.savings
    if summary.idle_cost is None or savings is None or savings.removable_cost is None:
        return None
    hours = made.window.hours
    return (
        f"== the week in money ({summary.prices_note or 'prices from the prices file'}): idle GPU capacity cost "
        f"{money(summary.idle_cost, summary.currency)} over {hours:g} h; packed by gpupack the same pods need "
        f"{savings.gpu_nodes_needed} GPU nodes instead of {savings.gpu_nodes_now}, and the {len(savings.removable)} "
        f"nodes it empties bill {money(savings.removable_cost, summary.currency)} in that time"
    )
