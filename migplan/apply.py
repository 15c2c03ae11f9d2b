"""`gpupack mig-plan --apply`: set the planned `nvidia.com/mig.config` on idle nodes, one at a time, behind a cordon.

The NVIDIA MIG manager reconfigures a node when that label changes and reports in `nvidia.com/mig.config.state`
(`pending`, then `success` or `failed`). It does not evict user pods, it can stay `pending` forever (gpu-operator
#2833) and it can say "applied successfully" with no instances created (mig-parted #18). So each node goes through:

    start -> cordon -> (pods re-checked) -> relabel -> wait for state=success -> wait for allocatable -> uncordon

`decide()` is the whole state machine as a pure function of what was last observed; `apply_plan()` only reads the
node, calls `decide()` and carries out the step. A failed node is left cordoned, annotated, with a Warning Event, a
log line and a metric, so an admin finds it and no workload lands on half-configured GPUs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile

from gpupack.kube import KubeCallFailed
from gpupack.quantity import QuantityError, parse_quantity

log = logging.getLogger("gpupack.migplan")

CONFIG_LABEL: Final = "nvidia.com/mig.config"
STATE_LABEL: Final = "nvidia.com/mig.config.state"
CAPABLE_LABEL: Final = "nvidia.com/mig.capable"
ANNOTATION: Final = "gpupack.io/mig-apply"
"""Set with the cordon, value the config being applied: tells an admin why the node is cordoned, and tells the next
run that gpupack (not the admin) cordoned it, so it may be retried and uncordoned."""
COMPONENT: Final = "gpupack-mig-apply"
CONFLICT_RETRIES: Final = 3

Outcome = Literal[
    "applied",
    "unchanged",
    "skipped-busy",
    "skipped-cordoned",
    "skipped-limit",
    "skipped-stopped",
    "failed",
    "timeout",
    "no-instances",
    "vanished",
    "api-error",
]
FAILURES: Final[frozenset[str]] = frozenset({"failed", "timeout", "no-instances", "vanished", "api-error"})
"""Outcomes that make the report not `ok`. A skip is not a failure: the node was left as it was."""


class NodeOps(Protocol):
    """The API calls `apply_plan` needs, as raw JSON (`gpupack.kube.KubeNodeOps` is the real one). Every method
    raises `gpupack.kube.KubeCallFailed` when the API server answers an error or does not answer."""

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The node, or None when it does not exist."""

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every node of the cluster."""

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to `node`."""

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch (RFC 7386: `None` removes a key)."""

    def create_event(self, event: dict[str, Any]) -> None:
        """Create a core/v1 Event."""


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


@dataclass(frozen=True, slots=True)
class NodeResult:
    """How one change ended, and why in words (for the command's output)."""

    node: str
    config: str
    outcome: Outcome
    message: str

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """One result per change, in the plan's order."""

    results: tuple[NodeResult, ...]

    @property
    def ok(self) -> bool:
        """No node failed (skips are fine)."""
        return not any(r.failed for r in self.results)


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


def is_mig_node(node: Mapping[str, Any]) -> bool:
    """A node the MIG manager looks after: it has a MIG config label, or GFD says it is MIG capable."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return CONFIG_LABEL in labels or labels.get(CAPABLE_LABEL) == "true"


def uses_gpus(pod: Mapping[str, Any]) -> bool:
    """A pod still running (not Succeeded/Failed) that requests or limits any `nvidia.com/*` resource, in a
    container or an init container: reconfiguring MIG under it would fail, and the MIG manager does not evict it."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(str(name).startswith("nvidia.com/") for name in resources.get(kind) or {}):
                return True
    return False


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

Action = Literal["skip", "cordon", "release", "relabel", "wait", "configured", "finish", "fail"]
"""skip: done, nothing touched; cordon: cordon and annotate; release: uncordon (we cordoned it) and end skipped;
relabel: set the config; wait: poll again; configured: state success seen, now wait for allocatable; finish:
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
    if seen.cordoned_by_us:  # already counted as unavailable: retrying it takes nothing more from the cluster
        return Step("relabel")
    limit = unavailable_limit(options.max_unavailable, seen.mig_nodes)
    if seen.unavailable + 1 > limit:
        return Step(
            "skip", "skipped-limit", f"{seen.unavailable} of {seen.mig_nodes} MIG nodes unschedulable, limit {limit}"
        )
    return Step("cordon")


# metrics and events ------------------------------------------------------------------------------------------


class ApplyMetrics:
    """One run's metrics, in a registry of their own: the command exits, so they are written to a file for
    node-exporter's textfile collector (`write_metrics`) rather than scraped."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.failures = Counter(
            "gpupack_mig_apply_failures",
            "Nodes whose MIG reconfiguration failed (outcome as reason); all but vanished ones are left cordoned.",
            ["reason"],
            registry=self.registry,
        )
        self.applied = Counter(
            "gpupack_mig_apply_applied_nodes", "Nodes relabelled, reconfigured and uncordoned.", registry=self.registry
        )
        self.last_run = Gauge(
            "gpupack_mig_apply_last_run_timestamp_seconds", "When the last apply run ended.", registry=self.registry
        )


def write_metrics(metrics: ApplyMetrics, path: Path) -> None:
    """Write the run's metrics in the Prometheus text format (atomically: a temporary file, then a rename)."""
    write_to_textfile(str(path), metrics.registry)


def node_event(
    node: Mapping[str, Any], kind: Literal["Normal", "Warning"], reason: str, message: str
) -> dict[str, Any]:
    """A core/v1 Event about `node` (Node events live in `default`, as the kubelet's do), for `kubectl describe`."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": str(meta.get("uid") or "")},
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


# the loop ----------------------------------------------------------------------------------------------------


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


def availability(nodes: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(unschedulable MIG nodes, MIG nodes) of the cluster."""
    mig = [n for n in nodes if is_mig_node(n)]
    return sum((n.get("spec") or {}).get("unschedulable") is True for n in mig), len(mig)


@dataclass
class _Run:
    nodes: NodeOps
    options: ApplyOptions
    metrics: ApplyMetrics
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Patch, retrying a 409 conflict a few times (another writer won a race for the node)."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                return self.nodes.patch_node(name, patch)
            except KubeCallFailed as exc:
                if exc.status != 409 or attempt == CONFLICT_RETRIES:
                    raise
                log.info("conflict patching node=%s attempt=%d, retrying", name, attempt + 1)
                self.sleep(min(self.options.poll, 1.0))
        raise AssertionError("unreachable")

    def event(self, node: Mapping[str, Any] | None, kind: Literal["Normal", "Warning"], reason: str, text: str) -> None:
        """Best effort: a node whose event cannot be written still has its annotation, log line and metric."""
        if node is None:
            return
        try:
            self.nodes.create_event(node_event(node, kind, reason, text))
        except KubeCallFailed as exc:
            log.warning(
                "cannot create event node=%s reason=%s: %s", (node.get("metadata") or {}).get("name"), reason, exc
            )

    def read(self, name: str, phase: Phase, since: float) -> dict[str, Any] | None:
        """The node. While waiting on the MIG manager, an API error is retried every poll until that wait's own
        timeout: giving up at the first blip would leave a node cordoned that the MIG manager configures fine."""
        while True:
            try:
                return self.nodes.get_node(name)
            except KubeCallFailed as exc:
                patience = {"relabelled": self.options.timeout, "configured": self.options.allocatable_timeout}
                if phase not in patience or self.clock() - since >= patience[phase]:
                    raise
                log.warning("cannot read node=%s while waiting, retrying: %s", name, exc)
                self.sleep(self.options.poll)

    def one(self, change: Relabel) -> NodeResult:
        phase: Phase = "start"
        since = self.clock()
        node: dict[str, Any] | None = None  # the last read that found it (its uid names it in events)
        cordoned = False
        try:
            while True:
                found = self.read(change.node, phase, since)
                node = found or node
                pods = self.nodes.pods_on(change.node) if found is not None and phase in ("start", "cordoned") else []
                seen = observe(found, pods, self.clock() - since)
                if phase == "start" and found is not None:
                    unavailable, mig_nodes = availability(self.nodes.list_nodes())
                    seen = replace(seen, unavailable=unavailable, mig_nodes=mig_nodes)
                    cordoned = seen.cordoned_by_us
                step = decide(change, phase, seen, self.options)
                if step.action == "wait":
                    self.sleep(self.options.poll)
                elif step.action == "cordon":
                    self.patch(change.node, cordon_patch(change.config))
                    cordoned, phase = True, "cordoned"
                    log.info("cordoned node=%s config=%s", change.node, change.config)
                elif step.action == "relabel":
                    self.patch(change.node, relabel_patch(change.config))
                    phase, since = "relabelled", self.clock()
                    log.info("relabelled node=%s config=%s", change.node, change.config)
                elif step.action == "configured":
                    phase, since = "configured", self.clock()
                else:
                    assert step.outcome is not None
                    if step.action in ("release", "finish"):
                        self.patch(change.node, uncordon_patch())
                        cordoned = False
                    return self.done(change, step.outcome, step.message, node, cordoned)
        except KubeCallFailed as exc:
            return self.done(change, "api-error", f"node {change.node}: {exc}", node, cordoned)

    def done(
        self, change: Relabel, outcome: Outcome, message: str, node: Mapping[str, Any] | None, cordoned: bool
    ) -> NodeResult:
        """Report one node's end: log, metric and event for a success or a failure."""
        if outcome == "applied":
            self.metrics.applied.inc()
            self.event(node, "Normal", "MigReconfigured", f"gpupack set {CONFIG_LABEL}={change.config}: {message}")
            log.info("applied node=%s config=%s: %s", change.node, change.config, message)
        elif outcome in FAILURES:
            left = "the node is gone" if outcome == "vanished" else "left cordoned" if cordoned else "not cordoned"
            message = f"{message}; {left}"
            self.metrics.failures.labels(reason=outcome).inc()
            if outcome != "vanished":
                self.event(node, "Warning", "MigReconfigureFailed", f"{CONFIG_LABEL}={change.config}: {message}")
            log.warning(
                "MIG reconfiguration failed node=%s config=%s outcome=%s: %s",
                change.node,
                change.config,
                outcome,
                message,
            )
        else:
            log.info("%s node=%s config=%s: %s", outcome, change.node, change.config, message)
        return NodeResult(change.node, change.config, outcome, message)


def apply_plan(
    nodes: NodeOps,
    changes: Sequence[Relabel],
    options: ApplyOptions = ApplyOptions(),
    *,
    metrics: ApplyMetrics | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ApplyReport:
    """Apply `changes` one node at a time, in order; blocking (run it in a thread from async code).

    Each node is re-read when its turn comes (the plan may be stale) and `decide()` drives it to an outcome. A
    `skipped-limit` ends the run: the remaining nodes get the same outcome, since only an admin's uncordon frees
    capacity. A failure ends it too unless `options.keep_going`; the rest are `skipped-stopped`. API errors become
    the `api-error` outcome, never an exception. One `NodeResult` per change, in the same order.
    """
    run = _Run(nodes, options, metrics if metrics is not None else ApplyMetrics(), clock, sleep)
    results: list[NodeResult] = []
    stopped: tuple[Outcome, str] | None = None
    for change in changes:
        if stopped is not None:
            results.append(NodeResult(change.node, change.config, *stopped))
            continue
        result = run.one(change)
        results.append(result)
        if result.outcome == "skipped-limit":
            stopped = ("skipped-limit", f"not tried: the unavailable limit was reached at {result.node}")
        elif result.failed and not options.keep_going:
            stopped = ("skipped-stopped", f"not tried: stopped after {result.node} ended {result.outcome}")
    run.metrics.last_run.set_to_current_time()
    return ApplyReport(tuple(results))
