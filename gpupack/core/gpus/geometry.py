"""Which sets of MIG instances one GPU can hold: NVIDIA's placement rules, applied to the catalog's data.

The rules are data in `gpupack.core.gpus.catalog` (NVIDIA MIG User Guide, "Supported MIG Profiles",
docs/platform/nvidia.md): a GPU has 8 memory slices (A30: 4) and 7 compute slices (A30: 4); an instance of a profile
starts at one of the profile's start slices and spans its memory slices; instances may not overlap, and their compute
slices add up to at most the GPU's. A count of instances per profile is legal when some placement of all of them exists.
That is stricter than the per-profile "instances max": `{"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}` respects every
maximum and still does not fit, which hand-written tables get wrong.

Everything here is pure and cached: a model has a few hundred legal placements, enumerated once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

from gpupack.core.contract import mig_resource
from gpupack.core.gpus.catalog import CATALOG, MODELS, MigProfile

Counts = tuple[tuple[str, int], ...]
"""Instances per profile name on one GPU, sorted by name, without zeros: hashable and comparable."""


class LayoutError(ValueError):
    """A set of MIG instances one GPU cannot hold; the message says why."""


def counts_of(mapping: Mapping[str, int]) -> Counts:
    """The canonical form of a profile -> count mapping (zeros dropped)."""
    return tuple(sorted((name, int(n)) for name, n in mapping.items() if n))


def profiles_of(model: str) -> dict[str, MigProfile]:
    """The model's MIG profiles by name; LayoutError for a model the catalog does not know."""
    profiles = CATALOG.get(model)
    if profiles is None:
        raise LayoutError(f"unknown GPU model {model!r}; known: {', '.join(sorted(CATALOG))}")
    return {p.name: p for p in profiles}


def memory_slices(model: str) -> int:
    """Memory slices of one GPU of the model (8, the A30's 4); LayoutError for a model without MIG."""
    profiles_of(model)
    return MODELS[model].memory_slices


def compute_slices(model: str) -> int:
    """Compute slices of one GPU of the model (7, the A30's 4); LayoutError for a model without MIG."""
    profiles_of(model)
    return MODELS[model].compute_slices


Placement = tuple[tuple[str, int], ...]
"""(profile name, start slice) of each instance, by start slice."""


def place(model: str, counts: Mapping[str, int]) -> Placement | None:
    """One legal placement of the instances on a GPU of the model, or None when there is none.

    Largest instances are placed first (they have the fewest starts), backtracking over the starts.
    """
    profiles = profiles_of(model)
    unknown = sorted(set(counts) - profiles.keys())
    if unknown:
        raise LayoutError(f"{model} has no MIG profile {', '.join(unknown)}; it has {', '.join(profiles)}")
    if sum(profiles[name].compute_slices * n for name, n in counts.items()) > compute_slices(model):
        return None
    wanted = sorted(
        (profiles[name] for name, n in counts.items() for _ in range(n)),
        key=lambda p: (-p.memory_slices, len(p.starts), p.name),
    )
    chosen: list[tuple[str, int]] = []

    def fill(index: int, used: int) -> bool:
        if index == len(wanted):
            return True
        profile = wanted[index]
        # identical instances take increasing starts: the same set in another order is not tried again
        low = chosen[-1][1] + 1 if index and wanted[index - 1] is profile else 0
        for start in profile.starts:
            span = ((1 << profile.memory_slices) - 1) << start
            if start >= low and not span & used:
                chosen.append((profile.name, start))
                if fill(index + 1, used | span):
                    return True
                chosen.pop()
        return False

    return tuple(sorted(chosen, key=lambda c: c[1])) if fill(0, 0) else None


def check(model: str, counts: Mapping[str, int]) -> Placement:
    """The placement of a layout, or LayoutError naming what is wrong with it."""
    for name, n in counts.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise LayoutError(f"{name}: the count must be a whole number of instances, not {n!r}")
    profiles = profiles_of(model)
    for name, n in counts.items():
        if name in profiles and n > profiles[name].max_instances:
            raise LayoutError(f"{model} holds at most {profiles[name].max_instances} {name}, not {n}")
    placement = place(model, counts)
    if placement is None:
        asked = ", ".join(f"{n}x {name}" for name, n in counts_of(counts))
        raise LayoutError(f"one {model} cannot hold {asked}: no placement of the instances fits its slices")
    return placement


@cache
def legal_layouts(model: str) -> frozenset[Counts]:
    """Every non-empty set of instances a GPU of the model can hold."""
    profiles = sorted(profiles_of(model).values(), key=lambda p: p.name)
    limit = compute_slices(model)
    found: set[Counts] = set()

    def grow(slot: int, used: int, compute: int, taken: tuple[str, ...]) -> None:
        # walk the slices left to right; at each, either leave it empty or start an instance there
        if slot >= memory_slices(model):
            if taken:
                found.add(counts_of({name: taken.count(name) for name in set(taken)}))
            return
        grow(slot + 1, used, compute, taken)
        for profile in profiles:
            span = ((1 << profile.memory_slices) - 1) << slot
            if slot in profile.starts and not span & used and compute + profile.compute_slices <= limit:
                after = slot + profile.memory_slices
                grow(after, used | span, compute + profile.compute_slices, (*taken, profile.name))

    grow(0, 0, 0, ())
    return frozenset(found)


def instances(per_gpu: Iterable[Counts]) -> dict[str, int]:
    """`nvidia.com/mig-<profile>` -> instances over a node's GPUs: what the device plugin's mixed strategy
    advertises once the layout is applied (and what `--apply` checks in the node's allocatable)."""
    total: dict[str, int] = {}
    for layout in per_gpu:
        for profile, n in layout:
            resource = mig_resource(profile)
            total[resource] = total.get(resource, 0) + n
    return dict(sorted(total.items()))


def _contains(big: Counts, small: Counts) -> bool:
    have = dict(big)
    return all(have.get(name, 0) >= n for name, n in small)


@cache
def _maximal(model: str, allowed: frozenset[str]) -> tuple[Counts, ...]:
    within = [c for c in legal_layouts(model) if all(name in allowed for name, _ in c)]
    maximal = [c for c in within if not any(o != c and _contains(o, c) for o in within)]
    return tuple(sorted(maximal))


def maximal_layouts(model: str, allowed: Iterable[str]) -> tuple[Counts, ...]:
    """The legal layouts made of the `allowed` profiles to which no further allowed instance can be added.

    Serving a demand with the fewest GPUs never needs anything else: any legal layout grows into a maximal one,
    and the extra instances only add headroom. Profiles outside `allowed` are never created, so the webhook,
    which sizes pods among the profiles nodes advertise, is not offered one that nobody asked for.
    """
    return _maximal(model, frozenset(allowed).intersection(profiles_of(model)))
