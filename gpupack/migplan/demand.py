"""What the MIG layouts must serve, and the MIG nodes that can serve it, read from a cluster's objects.

Demand counts MIG instances per resource (`nvidia.com/mig-1g.5gb`). A pod carrying gpupack labels is sized again
by the webhook's own `plan()`, as if every profile of the cluster's MIG GPU models were offered: its present request
was sized against the present layouts (an 8Gi model gets `2g.10gb` where no `1g.10gb` exists), and the point of
a new layout is to offer what the webhook would pick. Any other pod counts what it requests. Pods that finished,
and pods on nodes that are not MIG nodes, do not count; pending pods do, that is what they wait for.

A forecast (`--demand FILE`: instances per profile, e.g. the peak over last week) raises the demand to at least
those counts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpupack.core import contract
from gpupack.core.gpus.catalog import CATALOG
from gpupack.core.gpus.geometry import compute_slices
from gpupack.core.gpus.stock import DISABLED
from gpupack.core.kube import facts_from_lists
from gpupack.core.objects import GFD_COUNT, GFD_PRODUCT, is_finished, labels_of
from gpupack.core.policy import Policy
from gpupack.extender.demand import DemandError, pod_requests
from gpupack.extender.inventory import node_from_json
from gpupack.migplan.nodes import CONFIG_LABEL, is_mig_node, uses_gpus
from gpupack.migplan.solve import PROFILE_PREFIX, MigNode, PlanError
from gpupack.report.cluster import Cluster
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch

GPU_PREFIX = "nvidia.com/"
"""Every GPU resource the device plugin advertises: whole, time-sliced or MIG."""
MAX_DEMAND_BYTES = 1024 * 1024


def mig_nodes(
    cluster: Cluster, policy: Policy, *, whole_gpu_nodes: bool = False
) -> tuple[list[MigNode], dict[str, str]]:
    """The cluster's MIG nodes of a catalog model, and the MIG nodes left out with the reason. A node is free when
    no unfinished pod on it uses a GPU.

    A node whose GPUs a DRA driver publishes is not planned: with partitionable devices there is no layout to
    choose, and `--apply` waits for a layout in the node's allocatable, where a DRA node lists none.

    A MIG-capable node with MIG off (`all-disabled`, or advertising whole GPUs and no instance) serves whole-GPU
    pods, training above all: it is left out unless `whole_gpu_nodes`, since turning it to MIG is a decision about
    those pods that the MIG demand cannot make.
    """
    out: list[MigNode] = []
    skipped: dict[str, str] = {}
    for node in cluster.nodes:
        if not is_mig_node(node):
            continue
        try:
            record = node_from_json(node, policy)
        except ValueError as exc:
            skipped[str((node.get("metadata") or {}).get("name") or "?")] = str(exc)
            continue
        dra = cluster.dra.get(record.name)
        if dra is not None:
            skipped[record.name] = (
                "GPUs from a DRA driver with partitionable devices: kube-scheduler carves MIG devices on demand"
                if dra.partitionable
                else "MIG devices published by a DRA driver: mig-plan plans device-plugin nodes, whose allocatable "
                "--apply checks"
            )
            continue
        if record.gpu_model not in CATALOG:
            skipped[record.name] = f"GPU model unknown ({record.product or f'no {GFD_PRODUCT} label'})"
            continue
        if record.gpu_count < 1:
            skipped[record.name] = f"GPU count unknown (no {GFD_COUNT} label)"
            continue
        busy = any(uses_gpus(p) for p in cluster.pods_on(record.name))
        offered = {r: n for r, n in record.allocatable.items() if r.startswith(PROFILE_PREFIX) and n > 0}
        config = labels_of(node).get(CONFIG_LABEL)
        if (config == DISABLED or not offered) and not whole_gpu_nodes:
            skipped[record.name] = "MIG off (whole GPUs); --include-whole-gpu-nodes plans it"
            continue
        out.append(MigNode(record.name, record.gpu_model, record.gpu_count, not busy, config, offered))
    return out, skipped


def sizing_context(policy: Policy, models: Iterable[str]) -> MutationContext:
    """The webhook's context with every profile of `models` advertised but the whole-GPU one (and nothing else of
    the cluster's).

    A `7g` instance is a whole GPU behind MIG: a pod that needs all of a GPU's memory is better served by a whole
    GPU, and a layout that reserves one for it takes the GPU from every smaller profile. Such a pod sizes to
    `nvidia.com/gpu`, as it does where no layout offers the profile.
    """
    offered = {
        contract.mig_resource(p.name): "1"
        for m in sorted(set(models))
        for p in CATALOG[m]
        if p.compute_slices < compute_slices(m)
    }
    node = {"metadata": {"name": "mig-plan"}, "status": {"allocatable": offered}}
    return MutationContext(policy, "mig-plan", facts_from_lists(None, {"items": [node]}))


def _bare(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as its controller creates it again: unbound, without status, without GPU resources."""
    out = copy.deepcopy(dict(pod))
    out.pop("status", None)
    spec = out.setdefault("spec", {})
    spec.pop("nodeName", None)
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") if isinstance(container, dict) else None
        for part in ("requests", "limits"):
            if isinstance(resources, dict) and isinstance(resources.get(part), dict):
                for r in [r for r in resources[part] if str(r).startswith(GPU_PREFIX)]:
                    del resources[part][r]
    return out


def pod_demand(pod: Mapping[str, Any], context: MutationContext, *, resize: bool) -> dict[str, int]:
    """GPU resources the pod needs: with `resize`, the webhook's sizing for a labelled pod; else what it asks."""
    labelled = any(k.startswith(f"{contract.DOMAIN}/") for k in labels_of(pod))
    source: Mapping[str, Any] = pod
    if labelled and resize:
        raw = _bare(pod)
        meta = raw.get("metadata") or {}
        try:
            decision = plan(raw, meta.get("namespace"), context)
        except ValueError:
            decision = None
        if decision is not None and decision.allowed and decision.ops:
            source = apply_patch(raw, decision.ops)
    try:
        requests = pod_requests(source.get("spec") or {})
    except DemandError:
        return {}
    return {r: n for r, n in requests.items() if r.startswith(GPU_PREFIX) and n > 0}


@dataclass(frozen=True, slots=True)
class Demand:
    """What the pods ask of the MIG nodes."""

    mig: dict[str, int]
    """Instances per MIG resource: the plan's demand."""
    whole_gpus: int
    """Whole GPUs (`nvidia.com/gpu`) pending pods ask: no MIG layout serves them; told, not planned."""


def cluster_demand(cluster: Cluster, policy: Policy, nodes: Iterable[MigNode]) -> Demand:
    """What the unfinished pods that are pending or run on a MIG node ask.

    A pod is sized again by the webhook when it is pending, or bound to a free node (one the plan may change: with
    `--include-busy-nodes`, its pods are drained and created again, and sized again then). A pod bound to a node
    that keeps its layout counts what it holds: it is not created again, so sizing it again would count it twice,
    once in what it holds and once in what it would ask.
    """
    mig = {n.name: n for n in nodes}
    context = sizing_context(policy, (n.model for n in mig.values()))
    total: dict[str, int] = {}
    whole = 0
    for pod in cluster.pods:
        if is_finished(pod):
            continue
        where = (pod.get("spec") or {}).get("nodeName")
        if where and where not in mig:
            continue
        if not where:
            asked = pod_demand(pod, context, resize=True)
        else:
            asked = pod_demand(pod, context, resize=False)
            if mig[where].free and any(r.startswith(PROFILE_PREFIX) for r in asked):
                asked = pod_demand(pod, context, resize=True)
        for resource, n in asked.items():
            if resource.startswith(PROFILE_PREFIX):
                total[resource] = total.get(resource, 0) + n
        if not where:
            whole += asked.get(contract.RESOURCE_GPU, 0)
    return Demand(dict(sorted(total.items())), whole)


def read_forecast(path: Path) -> dict[str, int]:
    """A forecast file: a YAML or JSON mapping of profile (`1g.5gb`) or resource (`nvidia.com/mig-1g.5gb`) to a
    whole number of instances. Raises PlanError naming the file and the entry."""
    try:
        with path.open("rb") as handle:  # read at most the limit: /dev/zero or a pipe has no size to check first
            raw = handle.read(MAX_DEMAND_BYTES + 1)
    except OSError as exc:
        raise PlanError(f"--demand {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_DEMAND_BYTES:
        raise PlanError(f"{path}: larger than {MAX_DEMAND_BYTES} bytes; a demand is a few lines")
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: not YAML or JSON: {' '.join(str(exc).split())}") from exc
    if isinstance(data, dict) and isinstance(data.get("demand"), dict):
        data = data["demand"]
    if not isinstance(data, dict) or not data:
        raise PlanError(f"{path}: expected a mapping of MIG profile to instances, e.g. {{1g.5gb: 12}}")
    known = {p.name for profiles in CATALOG.values() for p in profiles}
    out: dict[str, int] = {}
    for key, value in data.items():
        profile = str(key).removeprefix(PROFILE_PREFIX)
        if profile not in known:
            raise PlanError(
                f"{path}: {json.dumps(str(key))} is not a MIG profile of a known GPU ({', '.join(sorted(known))})"
            )
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1_000_000:
            raise PlanError(f"{path}: {profile}: {value!r} is not a whole number of instances from 0 to 1000000")
        out[contract.mig_resource(profile)] = out.get(contract.mig_resource(profile), 0) + value
    return out


def with_forecast(demand: Mapping[str, int], forecast: Mapping[str, int]) -> dict[str, int]:
    """Per resource, the larger of what pods ask now and what the forecast says."""
    keys = set(demand) | set(forecast)
    return {r: max(demand.get(r, 0), forecast.get(r, 0)) for r in sorted(keys)}
