"""What the plan changes, in the MIG manager's terms: named mig-parted layouts and the node labels selecting them.

A node whose GPUs all hold one stock layout gets the stock name (`all-balanced`), which every MIG manager knows.
Any other node layout gets a name made from its content, `gpupack-<model>-<hash>`: the same layout always has the
same name, so planning twice does not relabel a node whose layout did not change, and two models never share a
name (their profile names differ: `1g.10gb` is 2 of 8 memory slices on an A100-40GB and 1 on an A100-80GB).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from migplan.geometry import Counts
from migplan.solve import NodePlan, Plan
from migplan.stock import DISABLED, stock_name


def config_name(plan: NodePlan) -> str:
    """The mig-parted config name (a label value: at most 63 characters) for the node's layout."""
    stock = stock_name(plan.model, dict(enumerate(plan.per_gpu)), len(plan.per_gpu))
    if stock is not None:
        return stock
    digest = hashlib.sha256(json.dumps([plan.model, plan.per_gpu]).encode()).hexdigest()[:10]
    return f"gpupack-{plan.model.lower()}-{digest}"


def entries(per_gpu: tuple[Counts, ...]) -> list[dict[str, Any]]:
    """mig-parted entries of a node layout: `devices: all` when every GPU is alike, else one entry per layout
    listing its GPU indices (nvidia-smi's order, which mig-parted uses)."""
    groups: dict[Counts, list[int]] = {}
    for index, layout in enumerate(per_gpu):
        groups.setdefault(layout, []).append(index)
    if len(groups) == 1:
        (layout,) = groups
        return [{"devices": "all", "mig-enabled": True, "mig-devices": dict(layout)}]
    return [
        {"devices": indices, "mig-enabled": True, "mig-devices": dict(layout)}
        for layout, indices in sorted(groups.items(), key=lambda g: g[1])
    ]


def mig_parted_config(nodes: Iterable[NodePlan], *, with_stock: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `version: v1` mig-parted document holding the plan's layouts beyond the stock ones.

    A GPU Operator whose MIG manager reads a custom ConfigMap no longer sees the stock layouts; `with_stock` (the
    stock entries by name, e.g. from the operator's default ConfigMap) are then copied in for the names the plan
    uses, with `all-disabled`.
    """
    configs: dict[str, Any] = {}
    for node in nodes:
        name = config_name(node)
        if name.startswith("gpupack-"):
            configs[name] = entries(node.per_gpu)
        elif with_stock is not None and name in with_stock:
            configs[name] = with_stock[name]
    if with_stock is not None and DISABLED in with_stock:
        configs[DISABLED] = with_stock[DISABLED]
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def labels(plan: Plan) -> dict[str, str]:
    """Node -> the `nvidia.com/mig.config` value the plan sets."""
    return {node.node: config_name(node) for node in plan.nodes}
