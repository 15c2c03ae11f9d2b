"""mig-parted's stock layouts, the names a MIG manager knows without a custom config, per GPU model.

Source: NVIDIA/mig-parted `deployments/systemd/config-default.yaml` (commit 5ffc59fe), which the GPU Operator ships as
its default `default-mig-parted-config`. Only the entries for the models of `gpupack.core.gpus.catalog.CATALOG` are
kept, without the `+me` (media extension) and `.gfx` variants, which the device plugin advertises under other resource
names. A stock name means a different set of instances on each model (`all-balanced` is 2x 1g.5gb + 2g.10gb + 3g.20gb on
an A100-40GB, 2x 1g.10gb + 2g.20gb + 3g.40gb on an A100-80GB), and some names exist only on some models (`all-1g.5gb` on
the A100-40GB): `STOCK[name][model]` is absent where the name does not apply.

`DEVICE_IDS` are the PCI device ids mig-parted's `device-filter` matches, from the same file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from gpupack.core.gpus.geometry import Counts, counts_of

_A100_40 = "A100-40GB"
_EIGHTY = ("A100-80GB", "H100-80GB")
_H200 = "H200-141GB"
_A30 = "A30-24GB"


def _single(model: str | tuple[str, ...], profile: str, count: int) -> dict[str, Counts]:
    models = (model,) if isinstance(model, str) else model
    return {m: counts_of({profile: count}) for m in models}


STOCK: dict[str, dict[str, Counts]] = {
    "all-1g.5gb": _single(_A100_40, "1g.5gb", 7),
    "all-2g.10gb": _single(_A100_40, "2g.10gb", 3),
    "all-3g.20gb": _single(_A100_40, "3g.20gb", 2),
    "all-4g.20gb": _single(_A100_40, "4g.20gb", 1),
    "all-7g.40gb": _single(_A100_40, "7g.40gb", 1),
    "all-1g.10gb": {**_single(_EIGHTY, "1g.10gb", 7), **_single(_A100_40, "1g.10gb", 4)},
    "all-1g.20gb": _single(_EIGHTY, "1g.20gb", 4),
    "all-2g.20gb": _single(_EIGHTY, "2g.20gb", 3),
    "all-3g.40gb": _single(_EIGHTY, "3g.40gb", 2),
    "all-4g.40gb": _single(_EIGHTY, "4g.40gb", 1),
    "all-7g.80gb": _single(_EIGHTY, "7g.80gb", 1),
    "all-1g.18gb": _single(_H200, "1g.18gb", 7),
    "all-1g.35gb": _single(_H200, "1g.35gb", 4),
    "all-2g.35gb": _single(_H200, "2g.35gb", 3),
    "all-3g.71gb": _single(_H200, "3g.71gb", 2),
    "all-4g.71gb": _single(_H200, "4g.71gb", 1),
    "all-7g.141gb": _single(_H200, "7g.141gb", 1),
    "all-1g.6gb": _single(_A30, "1g.6gb", 4),
    "all-2g.12gb": _single(_A30, "2g.12gb", 2),
    "all-4g.24gb": _single(_A30, "4g.24gb", 1),
    "all-balanced": {
        _A100_40: counts_of({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        **{m: counts_of({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}) for m in _EIGHTY},
        _H200: counts_of({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        _A30: counts_of({"1g.6gb": 2, "2g.12gb": 1}),
    },
}
"""Stock layout name -> model -> the instances on each GPU."""

DISABLED = "all-disabled"
"""The stock name that turns MIG off: whole GPUs, `nvidia.com/gpu`."""

DEVICE_IDS: dict[str, tuple[str, ...]] = {
    _A100_40: ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
    "A100-80GB": ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
    "H100-80GB": ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
    _H200: ("0x233510DE", "0x233B10DE"),
    _A30: ("0x20B710DE",),
}


def stock_for(model: str) -> dict[str, Counts]:
    """The stock layouts that apply to the model, by name."""
    return {name: per_model[model] for name, per_model in STOCK.items() if model in per_model}


def stock_name(model: str, per_gpu: Mapping[int, Counts], gpus: int) -> str | None:
    """The stock name of a node layout, when every one of its `gpus` GPUs holds that stock layout."""
    layouts = set(per_gpu.values())
    if len(per_gpu) != gpus or len(layouts) != 1:
        return None
    (layout,) = layouts
    return next((name for name, counts in stock_for(model).items() if counts == layout), None)


CUSTOM_PREFIX = "gpupack-"
"""The start of the names of the layouts gpupack makes (the others are mig-parted's stock names)."""


def layout_name(model: str, per_gpu: tuple[Counts, ...]) -> str:
    """The mig-parted config name (a label value: at most 63 characters) of a node layout of the model: its stock
    name, else `gpupack-<model>-<digest of the layout>` (eight GPUs' layouts are too long to spell in 63)."""
    stock = stock_name(model, dict(enumerate(per_gpu)), len(per_gpu))
    if stock is not None:
        return stock
    digest = hashlib.sha256(json.dumps([model, per_gpu]).encode()).hexdigest()[:10]
    return f"{CUSTOM_PREFIX}{model.lower()}-{digest}"
