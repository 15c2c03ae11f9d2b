"""The layouts that serve a MIG demand with the fewest GPUs, then the fewest nodes: an integer program.

Demand is instances per MIG resource (`nvidia.com/mig-1g.5gb`: 60). Nodes that run GPU pods keep their layout
(reconfiguration needs the GPUs free and the MIG manager does not evict pods), and what they already offer is
taken off the demand first. Each free MIG node can give each of its GPUs one maximal layout made of the demanded
profiles its model has (`geometry.maximal_layouts`). Nodes of the same model and GPU count are interchangeable, so
the program counts GPUs per (node class, layout) and nodes used per class:

    minimise   BIG3 * unserved + BIG2 * GPUs + BIG1 * nodes + layouts used
    such that  sum(GPUs[c, l] * instances[l, r]) + unserved[r] >= demand[r]    for every resource r
               sum_l GPUs[c, l] <= gpus_per_node[c] * nodes[c] <= gpus_per_node[c] * free_nodes[c]

with each weight above the largest total of the goals below it, so an instance served always wins over fewer
GPUs, fewer GPUs over fewer nodes, fewer nodes over fewer distinct layouts. HiGHS (scipy's `milp`) solves it at
gap 0 in milliseconds at cluster sizes; should it hit the time limit, the best answer found is kept and the plan
says it is not proven optimal. The classic alternative, first-fit by hand-picked templates (HAMi's "first MIG
template suitable"), strands slices.

`fill` then gives every free node of a class (each model with a demanded profile) the same layout, the one that
holds the most copies of the demand's mix (`_node_mix`), so capacity grows node by node in the proportions the pods
ask for instead of a fixed `all-balanced` mix. When those layouts together would not serve the demand (several
classes sharing it unevenly), the needed nodes keep the optimum's layouts and only the others take the mix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from gpupack.core import contract
from gpupack.core.contract import mig_resource
from gpupack.core.gpus.geometry import Counts, instances, maximal_layouts, profiles_of

PROFILE_PREFIX = contract.RESOURCE_MIG_PREFIX


@dataclass(frozen=True, slots=True)
class MigNode:
    """A MIG-capable node as the planner sees it."""

    name: str
    model: str
    """Key of `gpupack.core.gpus.catalog.CATALOG`, e.g. `A100-40GB`."""
    gpus: int
    free: bool
    """No pod requests a GPU resource on it: its layout may change."""
    config: str | None = None
    """Its `nvidia.com/mig.config` label now."""
    offered: Mapping[str, int] = field(default_factory=dict)
    """MIG resources it advertises now (allocatable), by resource name."""


@dataclass(frozen=True, slots=True)
class NodePlan:
    """The layout chosen for one free node: one set of instances per GPU, GPU 0 first."""

    node: str
    model: str
    per_gpu: tuple[Counts, ...]

    @property
    def instances(self) -> dict[str, int]:
        """MIG resources the node advertises once applied (what `--apply` checks in its allocatable)."""
        return instances(self.per_gpu)


@dataclass(frozen=True, slots=True)
class Plan:
    """The answer: layouts for the nodes that serve the demand, and what could not be served."""

    demand: Mapping[str, int]
    nodes: tuple[NodePlan, ...]
    unserved: Mapping[str, int]
    """Instances of each resource neither busy nodes nor free ones can provide."""
    kept: tuple[str, ...]
    """Busy nodes, left as they are; their current instances count towards the demand."""
    idle: tuple[str, ...]
    """Free MIG nodes the plan leaves as they are (without `fill`: empty, the autoscaler can remove them)."""
    gpus_needed: int
    """GPUs of free nodes the demand needs (the optimum; with `fill` more GPUs get layouts, as headroom)."""
    nodes_needed: int
    """Free nodes those GPUs take."""
    optimal: bool = True
    """False when the program hit its time limit: the best plan found, not proven the fewest GPUs."""


class PlanError(ValueError):
    """A demand or cluster the planner cannot work with; the message says what."""


@dataclass(frozen=True, slots=True)
class _Class:
    model: str
    gpus: int
    nodes: tuple[MigNode, ...]
    layouts: tuple[Counts, ...]


def _classes(nodes: Sequence[MigNode], resources: set[str]) -> list[_Class]:
    groups: dict[tuple[str, int], list[MigNode]] = {}
    for node in nodes:
        groups.setdefault((node.model, node.gpus), []).append(node)
    out = []
    for (model, gpus), members in sorted(groups.items()):
        allowed = [p for p in profiles_of(model) if mig_resource(p) in resources]
        layouts = maximal_layouts(model, allowed) if allowed else ()
        if layouts:
            out.append(_Class(model, gpus, tuple(sorted(members, key=lambda n: n.name)), layouts))
    return out


def _residual(demand: Mapping[str, int], busy: Sequence[MigNode]) -> dict[str, int]:
    left = dict(demand)
    for node in busy:
        for resource, n in node.offered.items():
            if resource in left:
                left[resource] = max(0, left[resource] - n)
    return {r: n for r, n in left.items() if n > 0}


Solution = tuple[dict[tuple[int, Counts], int], dict[str, int], bool]
"""GPUs per (class index, layout), the instances left unserved, and whether HiGHS proved it optimal."""

TIME_LIMIT = 20.0
"""Seconds HiGHS may search; the program has a few dozen variables per GPU model, whatever the node count, and
solves in milliseconds, so the limit only guards against a pathological demand (the best answer found is kept)."""


def _solve(demand: Mapping[str, int], classes: Sequence[_Class]) -> Solution:
    """GPUs per (class index, layout), and the unserved instances, of the optimum.

    Four blocks of variables: GPUs per column (class, layout), nodes per class, unserved per resource, and a
    binary per column saying it is used. The last adds a fourth goal below the three of the module docstring:
    the fewest distinct layouts, so that a plan names few mig-parted configs.
    """
    resources = sorted(demand)
    columns = [(ci, layout) for ci, cls in enumerate(classes) for layout in cls.layouts]
    n_x, n_y, n_s = len(columns), len(classes), len(resources)
    size = 2 * n_x + n_y + n_s
    x0, y0, s0, u0 = 0, n_x, n_x + n_y, n_x + n_y + n_s
    capacity = [classes[ci].gpus * len(classes[ci].nodes) for ci, _ in columns]
    big_nodes = n_x + 1
    big_gpus = big_nodes * (sum(len(c.nodes) for c in classes) + 1)
    big_unserved = big_gpus * (sum(capacity) + 1)
    cost = np.zeros(size)
    cost[x0:y0], cost[y0:s0], cost[s0:u0], cost[u0:] = big_gpus, big_nodes, big_unserved, 1
    rows = np.zeros((n_s + n_y + n_x, size))
    low = np.full(n_s + n_y + n_x, -np.inf)
    high = np.zeros(n_s + n_y + n_x)
    for ri, resource in enumerate(resources):  # served + unserved >= demand
        for xi, (_, layout) in enumerate(columns):
            rows[ri, x0 + xi] = dict(layout).get(resource.removeprefix(PROFILE_PREFIX), 0)
        rows[ri, s0 + ri] = 1
        low[ri], high[ri] = demand[resource], np.inf
    for ci, cls in enumerate(classes):  # GPUs of a class <= its GPUs per node x nodes used
        row = n_s + ci
        for xi, (cj, _) in enumerate(columns):
            rows[row, x0 + xi] = 1 if cj == ci else 0
        rows[row, y0 + ci] = -cls.gpus
    for xi in range(n_x):  # a column holds GPUs only when it is counted as used
        row = n_s + n_y + xi
        rows[row, x0 + xi], rows[row, u0 + xi] = 1, -capacity[xi]
    upper = np.concatenate([capacity, [len(c.nodes) for c in classes], [demand[r] for r in resources], np.ones(n_x)])
    result = milp(
        cost,
        constraints=LinearConstraint(rows, low, high),
        integrality=np.ones(size),
        bounds=Bounds(np.zeros(size), upper.astype(float)),
        options={"time_limit": TIME_LIMIT, "mip_rel_gap": 0.0},
    )
    if result.x is None:  # cannot happen with the slack columns; kept as a named error rather than a crash
        raise PlanError(f"the layout program found no answer: {result.message}")
    values = np.rint(result.x).astype(int)
    gpus = {col: int(values[x0 + i]) for i, col in enumerate(columns) if values[x0 + i]}
    unserved = {r: int(values[s0 + i]) for i, r in enumerate(resources) if values[s0 + i]}
    return gpus, unserved, result.status == 0


def _layout_nodes(classes: Sequence[_Class], gpus: Mapping[tuple[int, Counts], int]) -> list[NodePlan]:
    """Needed GPUs onto nodes, each class's nodes in name order, a layout's GPUs together; a node's spare GPUs
    take its most common layout (headroom in the mix it already serves)."""
    plans: list[NodePlan] = []
    for ci, cls in enumerate(classes):
        queue = [layout for layout in sorted(cls.layouts) for _ in range(gpus.get((ci, layout), 0))]
        for node in cls.nodes:
            if not queue:
                break
            mine, queue = queue[: cls.gpus], queue[cls.gpus :]
            common = Counter(mine).most_common(1)[0][0]
            per_gpu = tuple(mine) + (common,) * (cls.gpus - len(mine))
            plans.append(NodePlan(node.name, cls.model, per_gpu))
    return plans


def plan(demand: Mapping[str, int], nodes: Sequence[MigNode], *, fill: bool = False) -> Plan:
    """The layouts for `nodes` that serve `demand` (instances per MIG resource) with the fewest GPUs, then nodes.

    Busy nodes (`free=False`) are kept as they are. With `fill`, every free node of a model with a demanded profile
    gets a layout in the demand's mix (see the module's docstring).
    """
    bad = {r: n for r, n in demand.items() if not r.startswith(PROFILE_PREFIX) or n < 0}
    if bad:
        raise PlanError(f"demand must count MIG resources (nvidia.com/mig-<profile>) from 0 up, got {bad}")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise PlanError("a node is listed twice")
    busy = [n for n in nodes if not n.free]
    free = [n for n in nodes if n.free]
    residual = _residual(demand, busy)
    classes = _classes(free, set(residual))
    gpus, unserved, optimal = _solve(residual, classes) if residual else ({}, {}, True)
    plans = _unchanged_first(_layout_nodes(classes, gpus), classes)
    gpus_needed, nodes_needed = sum(gpus.values()), len(plans)
    if fill and plans and not unserved:
        plans = _filled(residual, classes, plans)
    planned = {p.node for p in plans}
    return Plan(
        demand=dict(sorted(demand.items())),
        nodes=tuple(plans),
        unserved=dict(sorted(unserved.items())),
        kept=tuple(sorted(n.name for n in busy)),
        idle=tuple(sorted(n.name for n in free if n.name not in planned)),
        gpus_needed=gpus_needed,
        nodes_needed=nodes_needed,
        optimal=optimal,
    )


def _unchanged_first(plans: list[NodePlan], classes: Sequence[_Class]) -> list[NodePlan]:
    """The same layouts, each given to a free node of its class that already offers exactly its instances when
    there is one, the others to the remaining nodes in name order: planning again after the cluster changed moves
    no layout from a node that holds it to one that does not (two relabels, two reconfigurations, for nothing)."""
    out: list[NodePlan] = []
    for cls in classes:
        layouts = [p.per_gpu for p in plans if p.model == cls.model and len(p.per_gpu) == cls.gpus]
        owners: dict[str, tuple[Counts, ...]] = {}
        for node in cls.nodes:
            match = next((lay for lay in layouts if instances(lay) == dict(node.offered)), None)
            if match is not None:
                owners[node.name] = match
                layouts.remove(match)
        rest = iter(layouts)
        for node in cls.nodes:
            layout = owners.get(node.name) or next(rest, None)
            if layout is not None:
                out.append(NodePlan(node.name, cls.model, layout))
    return out


def _filled(residual: Mapping[str, int], classes: Sequence[_Class], needed: list[NodePlan]) -> list[NodePlan]:
    """Every free node of a class in the class's mix layout (`_node_mix`) when that serves the demand; else the
    needed nodes as planned and the others in the mix layout."""
    mixes = {ci: _node_mix(residual, cls) for ci, cls in enumerate(classes)}
    uniform = [
        NodePlan(node.name, cls.model, mix)
        for ci, cls in enumerate(classes)
        if (mix := mixes[ci]) is not None
        for node in cls.nodes
    ]
    served: Counter[str] = Counter()
    for plan_ in uniform:
        served.update(plan_.instances)
    if all(served[r] >= n for r, n in residual.items()):
        return uniform
    taken = {p.node for p in needed}
    return needed + [p for p in uniform if p.node not in taken]


def _node_mix(residual: Mapping[str, int], cls: _Class) -> tuple[Counts, ...] | None:
    """One node's GPUs laid out to hold the most copies of the demand's mix (of the profiles the model has), and
    among those the fewest distinct layouts; None when the class serves none of the demand.

    Every node the same: as load grows the pods fill nodes in the demand's proportions, so the fewest nodes are
    in use at any hour and the rest stay empty for the autoscaler; and one mig-parted config serves them all.
    Two small programs: the largest ratio t with every resource given at least t times its demand, then the
    fewest layouts keeping t.
    """
    resources = [
        r for r in sorted(residual) if any(dict(layout).get(r.removeprefix(PROFILE_PREFIX)) for layout in cls.layouts)
    ]
    if not resources:
        return None
    layouts = list(cls.layouts)
    n = len(layouts)
    gives = np.array([[dict(layout).get(r.removeprefix(PROFILE_PREFIX), 0) for layout in layouts] for r in resources])
    wants = np.array([residual[r] for r in resources], dtype=float)
    # variables: GPUs per layout (n), t, used per layout (n)
    rows = np.zeros((len(resources) + 1 + n, 2 * n + 1))
    rows[: len(resources), :n] = gives
    rows[: len(resources), n] = -wants
    rows[len(resources), :n] = 1
    for li in range(n):
        rows[len(resources) + 1 + li, li], rows[len(resources) + 1 + li, n + 1 + li] = 1, -cls.gpus
    low = np.concatenate([np.zeros(len(resources)), [cls.gpus], np.full(n, -np.inf)])
    high = np.concatenate([np.full(len(resources), np.inf), [cls.gpus], np.zeros(n)])
    integrality = np.concatenate([np.ones(n), [0], np.ones(n)])
    upper = np.concatenate([np.full(n, cls.gpus), [np.inf], np.ones(n)])
    options = {"time_limit": TIME_LIMIT}
    first = milp(
        np.concatenate([np.zeros(n), [-1.0], np.zeros(n)]),
        constraints=LinearConstraint(rows, low, high),
        integrality=integrality,
        bounds=Bounds(np.zeros(2 * n + 1), upper),
        options=options,
    )
    if first.x is None:
        return None
    best = float(first.x[n])
    floor = np.zeros(2 * n + 1)
    floor[n] = best * (1 - 1e-9)
    second = milp(
        np.concatenate([np.zeros(n + 1), np.ones(n)]),
        constraints=LinearConstraint(rows, low, high),
        integrality=integrality,
        bounds=Bounds(floor, upper),
        options=options,
    )
    x = second.x if second.x is not None else first.x
    counts = np.rint(x[:n]).astype(int)
    return tuple(layout for layout, k in zip(layouts, counts, strict=True) for _ in range(int(k)))
