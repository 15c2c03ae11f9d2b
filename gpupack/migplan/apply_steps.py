"""What `gpupack mig-plan --apply` does next to one node: the pure half of `apply`.

`decide()` is the whole state machine as a pure function of what the last reads of the node showed, so every
branch is tested without a server; `apply.apply_plan()` reads the node, calls it and carries the step out. The
patches it sends are here too, with why each one looks the way it does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.migplan.nodes import CONFIG_LABEL, STATE_LABEL, uses_gpus

ANNOTATION: Final = "gpupack.io/mig-apply"
"""Set with the cordon, value the config being applied: tells an admin why the node is cordoned, and tells the next
run that gpupack (not the admin) cordoned it, so it may be retried and uncordoned."""

Outcome = Literal[
    "applied",
    "unchanged",
    "skipped-busy",
    "skipped-cordoned",
    "skipped-limit",
    "skipped-stopped",
    "skipped-pending",
    "failed",
    "timeout",
    "no-instances",
    "vanished",
    "api-error",
]
FAILURES: Final[frozenset[str]] = frozenset({"failed", "timeout", "no-instances", "vanished", "api-error"})
"""Outcomes that make the report not `ok`. A skip is not a failure: the node was left as it was."""


@dataclass(frozen=True, slots=True)
class Relabel:
    """One planned change: give `node` the mig-parted config `config`."""

    node: str
    config: str
    """The `nvidia.com/mig.config` value to set."""
    expected: Mapping[str, int]
    """MIG resources the node must advertise in status.allocatable afterwards (at least these counts)."""


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    """How patient and how cautious one run is."""

    timeout: float = 900.0
    """Seconds to wait for state=success after the relabel (reconfiguration reboots the node on some clouds)."""
    allocatable_timeout: float = 120.0
    """Seconds after success for the device plugin to advertise the new instances."""
    poll: float = 5.0
    """Seconds between two reads of the node while waiting."""
    max_unavailable: float = 0.25
    """Fraction of the MIG nodes that may be unschedulable at once, counting nodes already cordoned; at least 1."""
    keep_going: bool = False
    """Go on to the next node after a failure (default: stop, as a cautious admin expects; the unavailable limit
    still applies, and the failed node, left cordoned, counts against it)."""

    def __post_init__(self) -> None:
        if not (self.timeout > 0 and self.allocatable_timeout >= 0 and self.poll > 0):
            raise ValueError("timeout and poll must be above 0, allocatable_timeout at least 0")
        if not 0 <= self.max_unavailable <= 1:
            raise ValueError(f"max_unavailable is a fraction of the MIG nodes, 0 to 1, not {self.max_unavailable}")


# observations ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation:
    """What the last reads of one node (and its pods) showed, and for how long the current phase has lasted."""

    exists: bool = True
    config: str | None = None
    state: str | None = None
    unschedulable: bool = False
    cordoned_by_us: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)
    gpu_pods: tuple[str, ...] = ()
    elapsed: float = 0.0
    unavailable: int = 0
    """MIG nodes unschedulable right now (read at the start of a node only)."""
    mig_nodes: int = 0


def _count(value: Any) -> int | None:
    try:
        return int(parse_quantity(value))
    except (QuantityError, TypeError, ValueError):
        return None


def observe(
    node: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]] = (), elapsed: float = 0.0
) -> Observation:
    """An Observation from a node's JSON (None: it does not exist) and the pods bound to it."""
    if node is None:
        return Observation(exists=False, elapsed=elapsed)
    meta = node.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    allocatable = {}
    for name, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        count = _count(value) if str(name).startswith("nvidia.com/") else None
        if count is not None:
            allocatable[str(name)] = count
    busy = tuple(
        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
        for p in pods
        if uses_gpus(p)
    )
    return Observation(
        config=labels.get(CONFIG_LABEL),
        state=labels.get(STATE_LABEL),
        unschedulable=(node.get("spec") or {}).get("unschedulable") is True,
        cordoned_by_us=ANNOTATION in annotations,
        allocatable=allocatable,
        gpu_pods=busy,
        elapsed=elapsed,
    )


def missing(expected: Mapping[str, int], allocatable: Mapping[str, int]) -> dict[str, int]:
    """Expected resources the node advertises fewer of than planned, with the count it does advertise.

    Only the expected profiles are checked, as "at least": a profile of the old layout can linger in allocatable
    (at 0, or at its old count until the kubelet drops the stopped plugin's resource), and failing on it would
    leave healthy reconfigured nodes cordoned.
    """
    return {name: allocatable.get(name, 0) for name, count in expected.items() if allocatable.get(name, 0) < count}


# the state machine -------------------------------------------------------------------------------------------

Phase = Literal["start", "cordoned", "relabelled", "configured"]
"""start: nothing done yet; cordoned: cordoned, pods to re-check; relabelled: waiting for the MIG manager's state;
configured: state success, waiting for the device plugin's allocatable."""

Action = Literal["skip", "cordon", "release", "relabel", "await", "wait", "configured", "finish", "fail"]
"""skip: done, nothing touched; cordon: cordon and annotate; release: uncordon (we cordoned it) and end skipped;
relabel: set the config; await: the label already says it and the MIG manager is at work, wait for its state
without a patch; wait: poll again; configured: state success seen, now wait for allocatable; finish:
uncordon, Normal Event, applied; fail: leave it cordoned, Warning Event, metric, log."""


@dataclass(frozen=True, slots=True)
class Step:
    """What `decide` says to do next; `outcome` and `message` are set for the steps that end a node."""

    action: Action
    outcome: Outcome | None = None
    message: str = ""


def unavailable_limit(max_unavailable: float, mig_nodes: int) -> int:
    """How many MIG nodes may be unschedulable at once: floor(fraction x MIG nodes), but at least 1."""
    return max(1, math.floor(max_unavailable * mig_nodes))


def decide(change: Relabel, phase: Phase, seen: Observation, options: ApplyOptions) -> Step:
    """The next step for `change`, given the phase reached and what the last reads showed. Pure.

    Why each check is there:
    - GPU pods (not Succeeded/Failed) skip the node: the MIG manager does not evict them, and reconfiguring under
      them fails or kills their work. They are checked again once cordoned, since a pod can bind between the
      first check and the cordon; the node is then uncordoned (gpupack cordoned it) and skipped.
    - A node cordoned by someone else is skipped: uncordoning it at the end would undo an admin's decision.
    - The cordon keeps new GPU pods off while the GPUs are torn down; at most `max_unavailable` of the MIG nodes
      may be unschedulable at once, counting every cordon, so a run never takes too much capacity away.
    - Only `success` written after the relabel counts (see `relabel_patch`); an absent state is still pending, and
      `timeout` bounds the wait because the MIG manager can stay `pending` forever.
    - `success` is not enough: the node is uncordoned only once allocatable shows the planned instances, because
      the MIG manager can report success with none created.
    """
    if not seen.exists:
        return Step("fail" if phase != "start" else "skip", "vanished", f"node {change.node} no longer exists")
    if phase == "start":
        return _start(change, seen, options)
    if phase == "cordoned":
        if seen.gpu_pods:
            return Step("release", "skipped-busy", f"GPU pods bound while cordoning: {', '.join(seen.gpu_pods)}")
        return Step("relabel")
    if seen.config != change.config:
        return Step("fail", "failed", f"{CONFIG_LABEL} changed to {seen.config!r} by someone else")
    if seen.state == "failed":
        return Step("fail", "failed", f"the MIG manager reports {STATE_LABEL}=failed after {seen.elapsed:.0f}s")
    if phase == "relabelled":
        if seen.state == "success":
            return Step("configured")
        if seen.elapsed >= options.timeout:
            state = seen.state or "unset"
            return Step("fail", "timeout", f"{STATE_LABEL} still {state} after {seen.elapsed:.0f}s")
        return Step("wait")
    lacking = missing(change.expected, seen.allocatable)
    if not lacking:
        return Step("finish", "applied", f"{change.config} applied, allocatable as planned")
    if seen.elapsed >= options.allocatable_timeout:
        have = ", ".join(f"{name}={count} (want {change.expected[name]})" for name, count in sorted(lacking.items()))
        return Step("fail", "no-instances", f"state success but after {seen.elapsed:.0f}s allocatable has {have}")
    return Step("wait")


def _start(change: Relabel, seen: Observation, options: ApplyOptions) -> Step:
    done = seen.config == change.config and seen.state == "success" and not missing(change.expected, seen.allocatable)
    if done:
        if seen.cordoned_by_us:  # an earlier run left it cordoned (say, no instances yet) and it has healed since
            return Step("finish", "applied", f"{change.config} was already applied; uncordoned")
        return Step("skip", "unchanged", f"already {change.config}, state success, allocatable as planned")
    if seen.unschedulable and not seen.cordoned_by_us:
        return Step("skip", "skipped-cordoned", "cordoned by someone else: left alone")
    if seen.gpu_pods:
        return Step("skip", "skipped-busy", f"GPU pods bound: {', '.join(seen.gpu_pods)}")
    if seen.config == change.config:
        return _labelled_already(change, seen)
    if seen.cordoned_by_us:  # already counted as unavailable: retrying it takes nothing more from the cluster
        return Step("relabel")
    limit = unavailable_limit(options.max_unavailable, seen.mig_nodes)
    if seen.unavailable + 1 > limit:
        return Step(
            "skip", "skipped-limit", f"{seen.unavailable} of {seen.mig_nodes} MIG nodes unschedulable, limit {limit}"
        )
    return Step("cordon")


def _labelled_already(change: Relabel, seen: Observation) -> Step:
    """The label already holds the config, but the node is not done (state not success, or no instances).

    Setting the same value again does nothing: the MIG manager acts only when the label's value changes (mig-parted
    `cmd/nvidia-mig-manager`: `if oldLabel != newLabel`), so a relabel would wait for a state that never comes.
    A `pending` state is the MIG manager at work: waited for on a node gpupack cordoned, left alone on another.
    Otherwise the node needs the MIG manager restarted (it applies the label when it starts), which gpupack does
    not do; it is reported as failed, untouched.
    """
    if seen.state == "pending":
        if seen.cordoned_by_us:
            return Step("await")
        return Step(
            "skip", "skipped-pending", f"the MIG manager is applying {change.config} (state pending): left alone"
        )
    if seen.state == "success" and seen.cordoned_by_us:
        return Step("configured")
    advice = (
        f"the MIG manager acts only when {CONFIG_LABEL} changes: restart the nvidia-mig-manager pod on "
        f"{change.node} (it applies the label when it starts), then run again"
    )
    if seen.state == "success":
        lacking = ", ".join(sorted(missing(change.expected, seen.allocatable)))
        return Step(
            "fail", "no-instances", f"already {change.config} with state success but without {lacking}; {advice}"
        )
    state = seen.state or "unset"
    return Step("fail", "failed", f"already {change.config} with {STATE_LABEL} {state}; {advice}")


# patches ---------------------------------------------------------------------------------------------------------


def cordon_patch(config: str) -> dict[str, Any]:
    """Cordon, and say so in an annotation: what is being applied, and that gpupack (not an admin) cordoned it."""
    return {"spec": {"unschedulable": True}, "metadata": {"annotations": {ANNOTATION: config}}}


def uncordon_patch() -> dict[str, Any]:
    """Undo `cordon_patch`: only ever sent to a node gpupack cordoned."""
    return {"spec": {"unschedulable": None}, "metadata": {"annotations": {ANNOTATION: None}}}


def relabel_patch(config: str) -> dict[str, Any]:
    """Set the config and remove the MIG manager's state label in one patch.

    The state label still says `success` from the previous layout. Were it left in place, the first poll after the
    relabel could read that stale `success` before the MIG manager has even noticed the change, and the node would
    be uncordoned on its old layout. Removed in the same write as the config changes, any `success` read afterwards
    was written by the MIG manager for this config (an absent state counts as pending).
    """
    return {"metadata": {"labels": {CONFIG_LABEL: config, STATE_LABEL: None}}}
