"""MIG placement rules: every layout the planner can produce is legal, the known illegal ones are refused, and the
stock layouts are what mig-parted ships. The oracle below places instances slice by slice, independently of
`gpupack.core.gpus.geometry`, and every count vector within the per-profile maxima is checked against it."""

from __future__ import annotations

import itertools

import pytest

from gpupack.core.gpus.catalog import CATALOG, MigProfile
from gpupack.core.gpus.geometry import LayoutError, check, counts_of, legal_layouts, maximal_layouts, place
from gpupack.core.gpus.stock import DEVICE_IDS, STOCK, stock_for


def fits(counts: dict[str, int], profiles: dict[str, MigProfile]) -> bool:
    """Oracle: some start per instance with no memory slice shared and the compute slices within the GPU's."""
    instances = [profiles[name] for name, n in counts.items() for _ in range(n)]
    if sum(p.compute_slices for p in instances) > max(p.compute_slices for p in profiles.values()):
        return False

    def go(i: int, used: frozenset[int]) -> bool:
        if i == len(instances):
            return True
        p = instances[i]
        return any(
            not (span := frozenset(range(s, s + p.memory_slices))) & used and go(i + 1, used | span) for s in p.starts
        )

    return go(0, frozenset())


def every_count_vector(model: str) -> list[dict[str, int]]:
    profiles = CATALOG[model]
    ranges = [range(p.max_instances + 1) for p in profiles]
    return [
        {p.name: n for p, n in zip(profiles, combo, strict=True) if n}
        for combo in itertools.product(*ranges)
        if any(combo)
    ]


@pytest.mark.parametrize("model", sorted(CATALOG))
def test_the_legal_layouts_are_exactly_the_count_vectors_the_oracle_can_place(model: str) -> None:
    profiles = {p.name: p for p in CATALOG[model]}
    oracle = {counts_of(c) for c in every_count_vector(model) if fits(c, profiles)}
    assert legal_layouts(model) == oracle
    assert len(oracle) > 10 if model != "A30-24GB" else len(oracle) > 5


@pytest.mark.parametrize("model", sorted(CATALOG))
def test_every_placement_found_uses_legal_starts_and_never_shares_a_slice(model: str) -> None:
    profiles = {p.name: p for p in CATALOG[model]}
    for layout in legal_layouts(model):
        placement = check(model, dict(layout))
        used: set[int] = set()
        for name, start in placement:
            assert start in profiles[name].starts
            span = set(range(start, start + profiles[name].memory_slices))
            assert not span & used, (layout, placement)
            used |= span
        assert sorted(n for n, _ in placement) == sorted(n for n, c in layout for _ in range(c))


@pytest.mark.parametrize(
    ("model", "layout", "why"),
    [
        ("A100-40GB", {"3g.20gb": 3}, "at most 2"),
        ("A100-40GB", {"1g.5gb": 8}, "at most 7"),
        ("A100-40GB", {"4g.20gb": 2}, "at most 1"),
        # each within its maximum, together too much: the 4g takes slices 0-3, the 3g 4-7, nothing is left
        ("A100-40GB", {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}, "no placement"),
        ("A100-40GB", {"7g.40gb": 1, "1g.5gb": 1}, "no placement"),
        ("A100-40GB", {"1g.10gb": 4, "1g.5gb": 1}, "no placement"),
        ("A100-40GB", {"2g.10gb": 3, "1g.5gb": 2}, "no placement"),
        ("H100-80GB", {"3g.40gb": 1, "4g.40gb": 1, "1g.10gb": 1}, "no placement"),
        ("A30-24GB", {"2g.12gb": 2, "1g.6gb": 1}, "no placement"),
        # nos' table: 40 GB profile names in its A100-80GB list
        ("A100-80GB", {"1g.5gb": 7}, "has no MIG profile 1g.5gb"),
        ("A100-80GB", {"3g.20gb": 2}, "has no MIG profile 3g.20gb"),
        ("H200-141GB", {"1g.10gb": 7}, "has no MIG profile 1g.10gb"),
        ("B200", {"1g.23gb": 7}, "unknown GPU model"),
    ],
)
def test_known_illegal_layouts_are_refused_with_the_reason(model: str, layout: dict[str, int], why: str) -> None:
    with pytest.raises(LayoutError, match=why):
        check(model, layout)


def test_a_count_that_is_not_a_whole_number_is_refused() -> None:
    with pytest.raises(LayoutError, match="whole number"):
        check("A100-40GB", {"1g.5gb": -1})
    with pytest.raises(LayoutError, match="whole number"):
        check("A100-40GB", {"1g.5gb": True})


def test_the_instance_maximum_alone_would_accept_what_does_not_fit() -> None:
    """Why placement is checked: a per-profile table of maxima, as hand-written planners keep, passes this."""
    layout = {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}
    profiles = {p.name: p for p in CATALOG["A100-40GB"]}
    assert all(n <= profiles[name].max_instances for name, n in layout.items())
    assert place("A100-40GB", layout) is None


@pytest.mark.parametrize("model", sorted(CATALOG))
def test_maximal_layouts_cannot_take_one_more_allowed_instance(model: str) -> None:
    names = [p.name for p in CATALOG[model]]
    for allowed in (names, names[:2], names[1:4]):
        for layout in maximal_layouts(model, allowed):
            assert all(name in allowed for name, _ in layout)
            for extra in allowed:
                grown = dict(layout)
                grown[extra] = grown.get(extra, 0) + 1
                assert not fits(grown, {p.name: p for p in CATALOG[model]}), (layout, extra)


def test_the_a100_40gb_maximal_layouts_of_its_five_classic_profiles() -> None:
    got = maximal_layouts("A100-40GB", ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"])
    assert counts_of({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}) in got  # all-balanced
    assert counts_of({"1g.5gb": 7}) in got
    assert counts_of({"3g.20gb": 1, "4g.20gb": 1}) in got
    assert counts_of({"1g.5gb": 3, "4g.20gb": 1}) in got
    assert counts_of({"2g.10gb": 3}) not in got  # a 1g.5gb still fits in slice 6
    assert len(got) == 12


def test_every_stock_layout_is_legal_on_its_model_and_the_balanced_ones_are_mig_parteds() -> None:
    for name, per_model in STOCK.items():
        for model, layout in per_model.items():
            check(model, dict(layout))
            assert model in CATALOG and model in DEVICE_IDS, (name, model)
    assert stock_for("A100-40GB")["all-balanced"] == counts_of({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert stock_for("H100-80GB")["all-balanced"] == counts_of({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    assert stock_for("A100-40GB")["all-1g.10gb"] == counts_of({"1g.10gb": 4})
    assert stock_for("A100-80GB")["all-1g.10gb"] == counts_of({"1g.10gb": 7})
    assert "all-1g.5gb" not in stock_for("A100-80GB")
