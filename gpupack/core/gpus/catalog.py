"""The GPU catalog: MIG profiles of the NVIDIA GPUs gpupack knows, with their memory and slice geometry.

Source: NVIDIA MIG User Guide, "Supported MIG Profiles" (design notes, section 5). A GPU has 8 memory slices
and up to 7 compute slices (A30: 4 and 4). A profile's placements are the start slices where an instance of it
may be created, each spanning `memory_slices` slices. The webhook sizes inference by memory from this table;
the extender and the simulator use the geometry to reason about fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass


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

CATALOG: dict[str, tuple[MigProfile, ...]] = {
    p[0].gpu: p for p in (A100_40GB, A100_80GB, H100_80GB, H200_141GB, A30_24GB)
}

# The models whose profiles the webhook offers by default (the list; A30 is known but opt-in).
DEFAULT_MIG_GPUS: tuple[str, ...] = ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")
