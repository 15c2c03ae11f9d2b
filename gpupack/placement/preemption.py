"""kube-scheduler's DefaultPreemption (its PostFilter plugin) for the synthetic day: which pods die so that a pod
that fits nowhere can run, with the gpupack extender's preempt verb or without it.

What kube-scheduler v1.36 does (pkg/scheduler/framework/plugins/defaultpreemption and framework/preemption;
docs/platform/kube-scheduler-extender.md, "Preemption"), and what this module does the same way:

1. A pod with `preemptionPolicy: Never` never preempts.
2. The nodes where preemption might help are those the pod failed on for a resolvable reason: a node its node
   selector, affinity or taints rule out is not one, nor a node the extender refused as `FailedAndUnresolvable`
   (`extender.filter.reject`'s `unresolvable`). A node that failed kube-scheduler's own resource fit was never sent
   to the extender, so the extender has no say there: a hot node full of batch pods is a potential node.
3. On each, the dry run (`select_victims`) removes every pod of lower priority; if the pod still does not fit, the
   node is no candidate. Then it gives pods back, the most important first (higher priority, then the one that
   started earlier), each kept when the pod still fits with it; the rest are the victims. A node that needs no
   victim is no candidate either. The dry run runs kube-scheduler's own plugins only, never the extender's filter.
4. With an extender that has a `preemptVerb`, the candidates go to it (`extender.preemption.preempt`, the
   function behind `POST /preempt`), which drops some and trims victims.
5. Among the candidates left, `pick` chooses as kube-scheduler's `pickOneNodeForPreemption`: fewest PDB
   violations, then the lowest highest-priority victim, the lowest sum of priorities (each shifted by 2^31, so
   fewer victims first), the fewest victims, the latest start among the highest-priority victims; the remaining
   tie is arbitrary in kube-scheduler, at random here.

Not modelled: PodDisruptionBudgets (the day has none), the nominated pods' reservation on a node (the day retries
the preemptor at once, with the same live data: kube-scheduler retries it within seconds of the victims' deletion,
long before a 5-minute utilization window moves), graceful termination, and the candidate sample of a cluster of
more than 100 nodes (kube-scheduler then tries at least 10 % of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpupack.placement.scheduler import fits

PRIORITY_SHIFT = 2**31
"""kube-scheduler adds MaxInt32 + 1 to every victim's priority before summing: more victims always sum higher."""


@dataclass(frozen=True, slots=True)
class Running:
    """What kube-scheduler's preemption reads of a bound pod."""

    key: str
    node: str
    priority: int
    started: float
    """When it started running (its status.startTime); the older of two equals is the more important."""
    requests: Mapping[str, int]


def _more_important_first(pod: Running) -> tuple[int, float]:
    """kube-scheduler's `MoreImportantPod` as a sort key: higher priority, then the earlier start."""
    return (-pod.priority, pod.started)


def select_victims(
    requests: Mapping[str, int],
    priority: int,
    allocatable: Mapping[str, int],
    used: Mapping[str, int],
    running: Sequence[Running],
) -> tuple[Running, ...]:
    """The victims kube-scheduler's dry run picks on one node (`SelectVictimsOnNode`); empty when the node is no
    candidate: the pod does not fit even with every lower-priority pod gone, or fits without any."""
    lower = [p for p in running if p.priority < priority]
    if not lower:
        return ()
    free = dict(used)
    for pod in lower:
        for resource, n in pod.requests.items():
            free[resource] = free.get(resource, 0) - n
    if not fits(requests, allocatable, free):
        return ()
    victims: list[Running] = []
    for pod in sorted(lower, key=_more_important_first):
        back = dict(free)
        for resource, n in pod.requests.items():
            back[resource] = back.get(resource, 0) + n
        if fits(requests, allocatable, back):
            free = back  # reprieved: the pod fits with it
        else:
            victims.append(pod)
    return tuple(victims)


def _cost(victims: Sequence[Running]) -> tuple[int, int, int, float]:
    """kube-scheduler's criteria 2 to 5 as one key, lower is better (PDB violations, criterion 1, are none)."""
    highest = max(v.priority for v in victims)
    latest = min(v.started for v in victims if v.priority == highest)
    return (highest, sum(v.priority + PRIORITY_SHIFT for v in victims), len(victims), -latest)


def pick(candidates: Mapping[str, Sequence[Running]], rng: np.random.Generator) -> str | None:
    """The node kube-scheduler preempts on among `candidates` (node -> victims), None when there is none."""
    if not candidates:
        return None
    costs = {node: _cost(victims) for node, victims in candidates.items()}
    best = min(costs.values())
    ties = sorted(node for node, cost in costs.items() if cost == best)
    return ties[int(rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
