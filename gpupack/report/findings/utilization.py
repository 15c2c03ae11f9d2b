"""Idle, underused and hot nodes by the guide's (docs/method.md) thresholds, nodes with no utilization to judge
(`unmeasured-node`), and GPUs that look busy by GPU_UTIL while their engine is mostly idle (`light-kernels`)."""

from __future__ import annotations

from gpupack.core import contract
from gpupack.report import cluster
from gpupack.report.document import Finding
from gpupack.report.findings.inputs import Inputs


def _money(inputs: Inputs, node: str) -> dict[str, float | None]:
    hours = inputs.idle_gpu_hours(node)
    price = inputs.price(node)
    return {"idle_gpu_hours": round(hours, 1), "cost": None if price is None else round(hours * price, 2)}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _unseen(inputs: Inputs) -> list[Finding]:
    """`unmeasured-node` for the cluster's GPU nodes the source has nothing about: no exporter there, a
    Prometheus that does not scrape it, a series naming the node by another label, or no log for it. Savings and
    classes leave them out, so they are said, not silently dropped."""
    if inputs.cluster is None:
        return []
    shared = inputs.policy.time_slicing.resource_name
    out = []
    for node in cluster.gpu_nodes_of(inputs.cluster, inputs.policy):
        node_name = cluster.name(node)
        if node_name in inputs.nodes:
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        resources = ", ".join(f"{r}={v}" for r, v in sorted(allocatable.items()) if contract.is_gpu_resource(r, shared))
        out.append(
            Finding(
                "unmeasured-node",
                "info",
                f"nothing from {inputs.usage.source} names this GPU node over the window: run the DCGM exporter on "
                "it and let Prometheus scrape it (or collect its nvidia-smi log); if its series name the node by "
                "another label, set extender.metrics.nodeLabel",
                node=node_name,
                evidence={"gpu_resources": resources, "samples": 0},
            )
        )
    return out


def findings(inputs: Inputs) -> list[Finding]:
    """One finding per idle, underused, hot or unmeasured node, and one per GPU with light kernels."""
    t = inputs.thresholds
    out: list[Finding] = []
    for name, node in inputs.nodes.items():
        node_class = inputs.classes[name]
        utils = {"util_mean": _round(node.util_mean, 1), "util_p95": _round(node.util_p95, 1)}
        evidence = {**utils, "gpus": node.gpus, **_money(inputs, name)}
        if node_class == "idle":
            out.append(
                Finding(
                    "idle-node",
                    "high",
                    f"handle first: under {t.idle:g} % for the window. Label its GPU pods for gpupack "
                    "(gpupack.io/workload) so they are packed onto busier nodes, and clear its scale-down "
                    "blockers so Cluster Autoscaler removes it",
                    node=name,
                    evidence=evidence,
                )
            )
        elif node_class == "underused":
            out.append(
                Finding(
                    "underused-node",
                    "medium",
                    f"in scope: under {t.underused:g} %. Share its GPUs (MIG or time-slicing through the "
                    "gpupack.io/workload label) and let the autoscaler remove the nodes packing empties",
                    node=name,
                    evidence=evidence,
                )
            )
        elif node_class == "hot":
            out.append(
                Finding(
                    "hot-node",
                    "medium",
                    f"over {t.hot:g} %, the guide's alert level: capacity may be short; keep latency-critical "
                    "pods off it (gpupack's extender skips hot nodes for them) and add GPUs if pods wait",
                    node=name,
                    evidence={**utils, "gpus": node.gpus},
                )
            )
        elif node_class == "unknown":
            out.append(
                Finding(
                    "unmeasured-node",
                    "info",
                    "no utilization for the window: nvidia-smi reads [N/A] on GPUs in MIG mode (NVML does not "
                    "measure MIG instances). Measure it with the DCGM exporter, whose DCGM_FI_PROF_GR_ENGINE_ACTIVE "
                    "covers MIG instances, and run the report with --prometheus-url",
                    node=name,
                    evidence={"gpus": node.gpus, "fb_used_fraction": _round(node.fb_used_fraction, 3)},
                )
            )
    out += _unseen(inputs)
    for gpu in inputs.physical:
        if gpu.util_mean is None or gpu.engine_mean is None:
            continue
        if gpu.util_mean >= t.light_kernels_util and gpu.engine_mean < t.light_kernels_engine:
            out.append(
                Finding(
                    "light-kernels",
                    "low",
                    "busy by GPU_UTIL (some kernel is running) but its engine is mostly idle: a candidate for "
                    "sharing (gpupack.io/sharing: mig or time-slicing); classes follow GPU_UTIL unless the report "
                    "runs with --metric engine-active",
                    node=gpu.node,
                    gpu=gpu.gpu,
                    evidence={"util_mean": round(gpu.util_mean, 1), "engine_mean": round(gpu.engine_mean, 1)},
                )
            )
    return out
