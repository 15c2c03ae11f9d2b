"""The GPU catalog: the NVIDIA GPU models gpupack knows, their MIG profiles, and each model's slice counts.

Source: NVIDIA MIG User Guide, "Supported MIG Profiles" (docs/platform/nvidia.md). A MIG GPU has 8 memory slices
and 7 compute slices, except the A30, which has 4 and 4. A profile's placements are the start slices where an
instance of it may be created, each spanning `memory_slices` slices.

Every number about a model lives here and nowhere else: the webhook sizes inference by memory from this table,
the extender and the report turn a MIG instance's activity and memory into a share of its GPU with
`compute_share` and `memory_share`, and the planner reads the placements (`gpupack.core.gpus.geometry`). A copy
of "7 compute slices" elsewhere once made a fully busy A30 `4g.24gb` read 57 %.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of one GPU model, e.g. `1g.10gb` of the A100-80GB."""

    gpu: str
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    max_instances: int
    starts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model: how GPU Feature Discovery and DCGM name it, its memory, and its MIG geometry."""

    name: str
    """The catalog's key, e.g. `A100-40GB`."""
    family: str
    """What every product name of the model contains (`A100`): GFD's `NVIDIA-A100-SXM4-40GB`, DCGM's
    `NVIDIA A100-SXM4-40GB`."""
    compute_slices: int = 0
    """MIG compute slices of one GPU (0: the model has no MIG)."""
    memory_slices: int = 0
    """MIG memory slices of one GPU (0: the model has no MIG)."""
    profiles: tuple[MigProfile, ...] = ()
    product: str | None = None
    """GFD's `nvidia.com/gpu.product` on a node of the model, where gpupack builds such nodes (the demo, the
    synthetic day); None where it does not."""
    memory_mib: int | None = None
    """GFD's `nvidia.com/gpu.memory` (MiB) beside `product`."""

    @property
    def mig(self) -> bool:
        """Whether the model can be partitioned with MIG."""
        return bool(self.profiles)


def _profiles(gpu: str, rows: list[tuple[str, int, int, int, int, tuple[int, ...]]]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(gpu, name, c, m, mem, n, starts) for name, c, m, mem, n, starts in rows)


def _seven_slice_gpu(gpu: str, unit_gb: int, double_gb: int, half_gb: int, full_gb: int) -> tuple[MigProfile, ...]:
    """A100/H100/H200 geometry: the same slices, memory sizes differ by model."""
    return _profiles(
        gpu,
        [
            (f"1g.{unit_gb}gb", 1, 1, unit_gb, 7, (0, 1, 2, 3, 4, 5, 6)),
            (f"1g.{double_gb}gb", 1, 2, double_gb, 4, (0, 2, 4, 6)),
            (f"2g.{double_gb}gb", 2, 2, double_gb, 3, (0, 2, 4)),
            (f"3g.{half_gb}gb", 3, 4, half_gb, 2, (0, 4)),
            (f"4g.{half_gb}gb", 4, 4, half_gb, 1, (0,)),
            (f"7g.{full_gb}gb", 7, 8, full_gb, 1, (0,)),
        ],
    )


A100_40GB = _seven_slice_gpu("A100-40GB", 5, 10, 20, 40)
A100_80GB = _seven_slice_gpu("A100-80GB", 10, 20, 40, 80)
H100_80GB = _seven_slice_gpu("H100-80GB", 10, 20, 40, 80)
H200_141GB = _seven_slice_gpu("H200-141GB", 18, 35, 71, 141)
A30_24GB = _profiles(
    "A30-24GB",
    [
        ("1g.6gb", 1, 1, 6, 4, (0, 1, 2, 3)),
        ("2g.12gb", 2, 2, 12, 2, (0, 2)),
        ("4g.24gb", 4, 4, 24, 1, (0,)),
    ],
)

SEVEN_SLICES = 7
"""Compute slices of the A100, H100 and H200 (8 memory slices): what a MIG profile the catalog does not know is
taken to be a share of, since every such name seen so far (driver drift like `3g.39gb`, the H100-94GB) is one."""

MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("A100-40GB", "A100", SEVEN_SLICES, 8, A100_40GB, "NVIDIA-A100-SXM4-40GB", 40960),
        GpuModel("A100-80GB", "A100", SEVEN_SLICES, 8, A100_80GB),
        GpuModel("H100-80GB", "H100", SEVEN_SLICES, 8, H100_80GB, "NVIDIA-H100-80GB-HBM3", 81559),
        GpuModel("H200-141GB", "H200", SEVEN_SLICES, 8, H200_141GB),
        GpuModel("A30-24GB", "A30", 4, 4, A30_24GB),
        GpuModel("T4-16GB", "T4", product="Tesla-T4", memory_mib=15360),
    )
}
"""Every model gpupack knows, by catalog key."""

CATALOG: dict[str, tuple[MigProfile, ...]] = {m.name: m.profiles for m in MODELS.values() if m.mig}
"""The MIG models' profiles, by catalog key."""

# The models whose profiles the webhook offers by default (the list; A30 is known but opt-in).
DEFAULT_MIG_GPUS: tuple[str, ...] = ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")

_LEADING_SLICES = re.compile(r"^(\d+)g\.")
_FAMILIES = ("H200", "H100", "A100", "A30")
"""MIG families in the order their names are tried (`H100` before `A100`: neither contains the other, but the
order is the one a reader checks)."""


def mig_model_of(product: str, memory_mib: int | None = None, mig_names: Iterable[str] = ()) -> str | None:
    """The MIG catalog model of a GPU named `product`: GFD's `nvidia.com/gpu.product` (`NVIDIA-A100-SXM4-40GB`) or
    DCGM's `modelName` (`NVIDIA A30`). An A100's memory comes from `memory_mib` (GFD's `nvidia.com/gpu.memory`) or
    the name. Without a known family, the first model that offers every one of `mig_names` (the profiles a node
    advertises: `1g.5gb` only exists on the A100-40GB). None when nothing tells."""
    text = product.upper()
    family = next((f for f in _FAMILIES if f in text), None)
    if family == "A100":
        big = (memory_mib or 0) > 50_000 or "80GB" in text
        return "A100-80GB" if big else "A100-40GB"
    if family is not None:
        return next(m.name for m in MODELS.values() if m.family == family and m.mig)
    names = set(mig_names)
    for model, profiles in CATALOG.items():
        if names and names <= {p.name for p in profiles}:
            return model
    return None


def profile_of(model: str | None, name: str) -> MigProfile | None:
    """The catalog entry of profile `name` on `model` (None when the model or the name is unknown)."""
    if model is None:
        return None
    return next((p for p in CATALOG.get(model, ()) if p.name == name), None)


def _base_name(profile: str) -> str:
    """A profile name without the media-extension suffix (`1g.10gb+me` is a `1g.10gb` with the media engines)."""
    return profile.split("+", 1)[0]


@cache
def _slices_by_name() -> dict[str, tuple[int, int]]:
    """Profile name -> (its compute slices, its GPU's), for the names that are the same on every model with them."""
    found: dict[str, set[tuple[int, int]]] = {}
    for model in MODELS.values():
        for p in model.profiles:
            found.setdefault(p.name, set()).add((p.compute_slices, model.compute_slices))
    return {name: slices.pop() for name, slices in found.items() if len(slices) == 1}


def instance_slices(profile: str, model: str | None = None) -> tuple[int, int]:
    """`(compute slices of a MIG instance of profile, compute slices of its GPU)`: `(4, 4)` for an A30 `4g.24gb`,
    `(3, 7)` for an A100 `3g.20gb`. The model, when known, decides; else the profile name, since no name the
    catalog knows differs between models; else a name of `<n>g.` is n of 7 (`SEVEN_SLICES`), 1 of 7 when even
    that is missing."""
    name = _base_name(profile)
    known = profile_of(model, name)
    if known is not None:
        return known.compute_slices, MODELS[known.gpu].compute_slices
    slices = _slices_by_name().get(name)
    if slices is not None:
        return slices
    match = _LEADING_SLICES.match(name)
    return (min(int(match.group(1)), SEVEN_SLICES) if match else 1), SEVEN_SLICES


def compute_share(profile: str, model: str | None = None) -> float:
    """How much of its GPU's compute a MIG instance of `profile` is (`instance_slices`, as a fraction).

    A GPU's busy fraction is the sum over its instances of activity times this (DCGM reports an instance's
    `DCGM_FI_PROF_GR_ENGINE_ACTIVE` relative to the instance, docs/platform/dcgm.md): a busy A30 `4g.24gb` is a
    busy GPU (4 of 4), a busy A100 `3g.20gb` 3/7 of one.
    """
    slices, total = instance_slices(profile, model)
    return slices / total


def slice_table() -> dict[str, tuple[int, int]]:
    """Every catalogued profile name with its `instance_slices` (the same on every model that has it): the table
    the PromQL fold is written from, so that Prometheus and Python fold alike."""
    return dict(sorted(_slices_by_name().items()))


def memory_share(profile: str, model: str | None) -> float:
    """How much of its GPU's memory a MIG instance of `profile` on `model` is: its memory slices over the model's
    (an A30 `4g.24gb` is 4 of 4, an A100 `3g.20gb` 4 of 8). The same name can differ by model (`1g.10gb` is 2 of 8
    slices on an A100-40GB, 1 of 8 on an A100-80GB), so an unknown model or name is 1/7, the smallest instance."""
    known = profile_of(model, _base_name(profile))
    if known is None:
        return 1 / SEVEN_SLICES
    return known.memory_slices / MODELS[known.gpu].memory_slices
