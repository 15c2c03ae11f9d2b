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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile

from gpupack.core.kube import KubeCallFailed
from gpupack.migplan.apply_steps import (
    FAILURES,
    ApplyOptions,
    Outcome,
    Phase,
    Relabel,
    cordon_patch,
    decide,
    observe,
    relabel_patch,
    uncordon_patch,
)
from gpupack.migplan.nodes import CONFIG_LABEL, is_mig_node

log = logging.getLogger("gpupack.migplan")

DEFAULT_OPTIONS = ApplyOptions()


class NodeOps(Protocol):
    """The API calls `apply_plan` needs, as raw JSON (`gpupack.core.kube.KubeNodeOps` is the real one). Every method
    raises `gpupack.core.kube.KubeCallFailed` when the API server answers an error or does not answer."""

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


COMPONENT: Final = "gpupack-mig-apply"
CONFLICT_RETRIES: Final = 3


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
                elif step.action == "await":
                    phase, since = "relabelled", self.clock()
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
    options: ApplyOptions = DEFAULT_OPTIONS,
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
