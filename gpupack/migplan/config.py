"""What the plan changes, in the MIG manager's terms: named mig-parted layouts and the node labels selecting them.

A node whose GPUs all hold one stock layout gets the stock name (`all-balanced`), which every MIG manager knows.
Any other node layout gets a name made from its content, `gpupack-<model>-<hash>`: the same layout always has the
same name, so planning twice does not relabel a node whose layout did not change, and two models never share a
name (their profile names differ: `1g.10gb` is 2 of 8 memory slices on an A100-40GB and 1 on an A100-80GB).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gpupack.core.gpus.geometry import Counts
from gpupack.core.gpus.stock import CUSTOM_PREFIX, layout_name
from gpupack.migplan.solve import NodePlan

CONFIG_KEY = "config.yaml"
"""The key of the MIG manager's ConfigMap that holds the mig-parted document."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation `kubectl apply` keeps the whole object in, as it was last applied."""


def config_name(plan: NodePlan) -> str:
    """The config name of a planned node's layout."""
    return layout_name(plan.model, plan.per_gpu)


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


def mig_parted_config(nodes: Iterable[NodePlan]) -> dict[str, Any]:
    """The `version: v1` mig-parted document holding the plan's layouts beyond the stock ones."""
    configs = {config_name(n): entries(n.per_gpu) for n in nodes if config_name(n).startswith(CUSTOM_PREFIX)}
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def mig_parted_document(config_map: Mapping[str, Any]) -> dict[str, Any]:
    """The mig-parted document of a MIG manager's ConfigMap. Raises ValueError naming the ConfigMap when its
    `config.yaml` is missing, not YAML, or holds no `mig-configs` mapping."""
    meta = config_map.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace')}/{meta.get('name')}"
    text = (config_map.get("data") or {}).get(CONFIG_KEY)
    try:
        document = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: {CONFIG_KEY} is not YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("mig-configs"), dict):
        raise ValueError(f"{where}: no {CONFIG_KEY} holding mig-configs (a mig-parted config)")
    return document


def merged_config_map(config_map: Mapping[str, Any], nodes: Iterable[NodePlan]) -> dict[str, Any]:
    """The MIG manager's ConfigMap with the plan's layouts added to its `config.yaml` (`kubectl apply -f` it).

    A custom ConfigMap replaces mig-parted's stock layouts, so the ones it holds are kept as they are, and a layout
    of the same name is replaced (the name is a digest of the layout: the same name is the same layout). Its name,
    namespace, labels and annotations are kept, but not kubectl's `last-applied-configuration`: that is the old
    content again, which a reviewer of the file would read as part of the change and `kubectl apply` rewrites
    anyway. Raises ValueError when the ConfigMap holds no mig-parted document.
    """
    meta = config_map.get("metadata") or {}
    document = mig_parted_document(config_map)
    document["mig-configs"] = {**document["mig-configs"], **mig_parted_config(nodes)["mig-configs"]}
    kept = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        kept["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": kept,
        "data": {**(config_map.get("data") or {}), CONFIG_KEY: yaml.safe_dump(document, sort_keys=False)},
    }
