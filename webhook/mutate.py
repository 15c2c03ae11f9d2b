"""Decide the mutation of one Pod: pure, from the raw object, the policy and what is known of the cluster.

`plan()` is the whole admission decision; the HTTP handler only parses, calls it and serialises the result.
Pods opt in with `gpupack.io/workload`, or by being GPU pods in a namespace whose webhook registration says it
opted in (`gpupack.io/enabled: "true"`, matched by the API server's namespaceSelector); every other pod is
admitted untouched. StatefulSet pods in an opted-in namespace are kept off spot even without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import orjson

from gpupack.core import contract
from gpupack.core.autoscalers import PROTECTING, says_evictable
from gpupack.core.cluster import UNKNOWN, ClusterFacts
from gpupack.core.k8s import InvalidPod, Pod, decode_pod, document, read_pod
from gpupack.core.lease import ASSUMED_LIVE, SchedulerStatus
from gpupack.core.objects import STATEFULSET
from gpupack.core.policy import ClassPolicy, Policy
from gpupack.webhook.bounds import too_large
from gpupack.webhook.claims import claim_template
from gpupack.webhook.labels import LabelError, WorkloadRequest, read_request
from gpupack.webhook.outcome import ChangeKind, Notes, clip
from gpupack.webhook.patches import PatchBuilder, PatchOp
from gpupack.webhook.placement import place
from gpupack.webhook.priority import apply_priority
from gpupack.webhook.resources import apply_claim, apply_gpu, apply_requests, asks_for_gpu, gpu_container
from gpupack.webhook.routing import route
from gpupack.webhook.sizing import choose_gpu
from gpupack.webhook.tolerations import tolerate_gpu_taints

Outcome = Literal["mutated", "unchanged", "skipped", "denied", "audited"]
ANNOTATIONS = ("metadata", "annotations")


class InvalidObject(ValueError):
    """The admission request's object is not a Pod gpupack can read (a malformed request, not a policy denial)."""


@dataclass(frozen=True, slots=True)
class MutationContext:
    """Everything besides the pod that the decision depends on."""

    policy: Policy
    version: str
    facts: ClusterFacts = UNKNOWN
    namespace_opted_in: bool = False
    scheduler: SchedulerStatus = ASSUMED_LIVE
    """The verdict on the policy's scheduler now (the webhook's Lease cache); offline callers assume it is up."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one pod: allowed or not, the patch, and the words for people and for the audit log."""

    allowed: bool
    outcome: Outcome
    workload: str = "none"
    ops: list[PatchOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    message: str = ""
    change_kinds: list[ChangeKind] = field(default_factory=list)
    unrouted: SchedulerStatus | None = None
    """Why the pod is not sent to the policy's scheduler (it has no live leader), when that is so."""


def parse_pod(raw: Any) -> Pod:
    """Read the fields gpupack needs; raises InvalidObject naming the first bad field."""
    if not isinstance(raw, dict):
        raise InvalidObject("request.object must be a Pod object")
    try:
        return read_pod(raw)
    except InvalidPod as exc:
        raise InvalidObject(f"request.object.{exc}") from exc


def _has_gpu(pod: Pod, policy: Policy) -> bool:
    shared = policy.time_slicing.resource_name
    for containers in (pod.spec.containers, pod.spec.init_containers or ()):
        for container in containers:
            if asks_for_gpu(container, shared):
                return True
    return False


def _skip(reason: str) -> Decision:
    return Decision(True, "skipped", message=reason)


def _autoscaler(
    pod: Pod, builder: PatchBuilder, policy: Policy, cls: ClassPolicy, req: WorkloadRequest, notes: Notes
) -> None:
    """Training restarts are expensive: keep the node autoscalers (`policy.autoscalers`) from evicting pods that
    do not checkpoint. An annotation the pod sets itself keeps its value; one that says the pod may be evicted
    stands for both autoscalers (writing the other's "do not" would contradict it), unless the policy enforces
    `autoscaler`."""
    if cls.safe_to_evict or req.checkpoint:
        return
    enforced = policy.enforces("autoscaler")
    evictable = says_evictable(pod.annotations)
    if evictable is not None and not enforced:
        notes.add("conflict", f"kept {evictable} from the pod")
        return
    for autoscaler in dict.fromkeys(policy.autoscalers):
        key, value = PROTECTING[autoscaler]
        own = pod.annotations.get(key)
        if own == value or (own is not None and not enforced):
            continue  # the pod's own protection (a do-not-disrupt duration, say) stands
        builder.set(ANNOTATIONS, key, value)
        notes.add("autoscaler", f"{key}={value} (no {contract.LABEL_CHECKPOINT}=true)")


def _plan_gpu_pod(pod: Pod, builder: PatchBuilder, ctx: MutationContext, stateful: bool, notes: Notes) -> str:
    """Intents for an opted-in GPU pod; returns its class. Raises LabelError for unusable labels."""
    policy = ctx.policy
    request = read_request(pod, policy.default_class)
    cls = policy.classes.of(request.workload)
    target = gpu_container(pod, policy.time_slicing.resource_name)
    claimed = claim_template(request, cls, policy)
    if claimed is not None:
        asked = apply_claim(pod, builder, policy, target, *claimed, notes)
    else:
        choice = choose_gpu(request, cls, policy, ctx.facts.advertised_resources)
        asked = apply_gpu(pod, builder, policy, target, choice, notes)
    if policy.tolerate_gpu_taints:
        tolerate_gpu_taints(pod, builder, asked or (contract.RESOURCE_GPU,), notes)
    apply_requests(pod, builder, policy, cls, notes)
    if stateful:
        place(pod, builder, policy, "forbid", "StatefulSet pods", notes)
    else:
        spot = cls.spot_for(request.checkpoint)
        why = request.workload if spot == cls.spot else f"{request.workload} pods that do not checkpoint"
        if place(pod, builder, policy, spot, why, notes) and spot != cls.spot:
            advice = f"kept off spot (it would lose its work): {contract.LABEL_CHECKPOINT}=true if it resumes"
            notes.add("advice", advice)
    apply_priority(pod, builder, policy, cls, ctx.facts, notes)
    _autoscaler(pod, builder, policy, cls, request, notes)
    route(pod, builder, policy, ctx.scheduler, notes)
    if claimed is not None and policy.scheduler.name is None:
        notes.add(
            "advice",
            "a pod with a GPU claim and no GPU resource is placed by the main scheduler's own plugins: it asks the "
            "extender only about pods that request a GPU resource (managedResources)",
        )
    return request.workload


def _refuse(message: str, audit: bool) -> Decision:
    """An opted-in pod gpupack cannot plan: denied, or in audit mode admitted with a "would refuse" warning."""
    if audit:
        return Decision(
            True,
            "audited",
            warnings=[clip(f"gpupack audit, would refuse: {message}")],
            audit_annotations={"would-deny": clip(f"gpupack: {message}", AUDIT_ANNOTATION_CHARS)},
            message=f"gpupack: {message}",
        )
    return Decision(
        False,
        "denied",
        message=f"gpupack: {message}",
        audit_annotations={"denied": clip(f"gpupack: {message}", AUDIT_ANNOTATION_CHARS)},
    )


def _too_large(raw: dict[str, Any], problem: str, ctx: MutationContext) -> Decision:
    """A pod over gpupack's bounds: refused when it asked for gpupack by label, else left alone."""
    metadata = raw.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if isinstance(labels, dict) and contract.LABEL_WORKLOAD in labels:
        return _refuse(problem, ctx.policy.mode == "audit")
    return Decision(True, "skipped", warnings=[clip(f"gpupack: left unchanged: {problem}")], message=problem)


def plan(raw: dict[str, Any], namespace: str | None, ctx: MutationContext) -> Decision:
    """Decide the admission of one Pod CREATE in `namespace` (the request's, which the API server sets: the
    object's own `metadata.namespace` may be empty or say anything, and counts only when the request has none).

    Returns a Decision; raises InvalidObject when `raw` is not a readable Pod. An opted-in pod with an invalid
    gpupack label, or larger than gpupack plans (`webhook.bounds`), is denied (allowed false, message naming the
    label and the valid values, or the bound), except in audit mode, where it is admitted with a warning saying
    it would have been refused. Namespaces never touched and the bounds are checked before the pod is read, so
    a malformed pod there is admitted or refused for that, not answered 400.
    """
    if not isinstance(raw, dict):
        raise InvalidObject("request.object must be a Pod object")
    gated = _gate(raw, namespace, ctx)
    if gated is not None:
        return gated
    pod = parse_pod(raw)
    return _decide(pod, document(pod), ctx)


def plan_json(data: bytes | msgspec.Raw, namespace: str | None, ctx: MutationContext) -> Decision:
    """`plan()` of the Pod in JSON text (the webhook's request body), decoding only the fields gpupack reads.

    A pod those fields do not decode as (a wrong type, a malformed affinity) is decoded whole and given to
    `plan()`, which decides in its own order (a namespace never touched, the bounds, then the field it names);
    raises InvalidObject as `plan()` does, and when the text is not JSON.
    """
    try:
        pod = decode_pod(data)
    except (InvalidPod, msgspec.DecodeError, RecursionError):
        try:
            raw = orjson.loads(memoryview(data))
        except orjson.JSONDecodeError as exc:
            raise InvalidObject(f"request.object is not JSON: {exc}") from exc
        return plan(raw, namespace, ctx)
    return plan_pod(pod, namespace, ctx)


DECISIONS_KEPT = 256
"""Decisions kept for pods of the same shape (`plan_pod`); the cache is emptied when it holds more."""
MAX_SHAPE_BYTES = 8 * 1024
"""The largest pod shape (msgpack bytes) whose decision is kept: a pod's is 1-2 KiB. With DECISIONS_KEPT this
bounds the cache at a few MB, whatever a client sends."""
_DECISIONS: dict[tuple[int, str | None, bytes], tuple[MutationContext, Decision]] = {}
_SHAPE = msgspec.msgpack.Encoder()


def shape_of(pod: Pod) -> bytes:
    """The pod as the planner reads it, without its name: what every replica of one template has in common.

    A controller creates its pods from one template, so a ReplicaSet scaling up, a Job's workers or a
    StatefulSet's replicas reach the webhook as pods that differ only in `metadata.name` (and fields gpupack does
    not decode, such as the uid). The decision does not read the name (a test holds it to that), so it is the same
    for all of them.
    """
    meta = pod.metadata
    if meta is not None and (meta.name is not None or meta.generate_name is not None):
        pod = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(meta, name=None, generate_name=None))
    return _SHAPE.encode(pod)


def plan_pod(pod: Pod, namespace: str | None, ctx: MutationContext) -> Decision:
    """`plan()` of a Pod already read (`gpupack.core.k8s.decode_pod`): the same checks in the same order, against the
    pod's JSON form as the model holds it, which has every field they read and patch.

    The decision is kept for the pod's shape (`shape_of`), its namespace and the context, and given again for the
    next pod of that shape while the context is the same object. `WebhookState.context` makes a new context when
    the policy, the cluster snapshot or the verdict on the scheduler changes, so a kept decision never outlives
    what it was made from. Planning took about 31 µs of an admission's 49 µs on the recorded review; a kept one
    costs the shape's encoding and a lookup. Kept decisions are shared: read them, never change them.
    """
    doc = document(pod)
    gated = _gate(doc, namespace, ctx)  # first: a pod over the bounds is not even encoded
    if gated is not None:
        return gated
    shape = shape_of(pod)
    key = (id(ctx), namespace, shape)
    kept = _DECISIONS.get(key)
    if kept is not None and kept[0] is ctx:  # the context is held in the entry, so its id is not reused meanwhile
        return kept[1]
    decision = _decide(pod, doc, ctx)
    if len(shape) <= MAX_SHAPE_BYTES:
        if len(_DECISIONS) >= DECISIONS_KEPT:
            _DECISIONS.clear()
        _DECISIONS[key] = (ctx, decision)
    return decision


def _gate(raw: dict[str, Any], namespace: str | None, ctx: MutationContext) -> Decision | None:
    """What is decided before the pod is read: namespaces never touched, and pods over the bounds."""
    metadata = raw.get("metadata")
    own = metadata.get("namespace") if isinstance(metadata, dict) else None
    ns = namespace or (own if isinstance(own, str) else "")
    if ns in ctx.policy.never_touched:
        return _skip(f"namespace {ns} is never touched")
    problem = too_large(raw)
    if problem is not None:
        return _too_large(raw, problem, ctx)
    return None


def _decide(pod: Pod, doc: dict[str, Any], ctx: MutationContext) -> Decision:
    """The decision for a pod read and within the bounds; `doc` is its JSON form, which the patch is built on."""
    policy = ctx.policy
    if contract.ANNOTATION_MIRROR_POD in pod.annotations:
        return _skip("mirror pod")
    labelled = contract.LABEL_WORKLOAD in pod.labels
    has_gpu = _has_gpu(pod, policy)
    stateful = pod.controller_kind() == STATEFULSET
    if not labelled and not (ctx.namespace_opted_in and (has_gpu or stateful)):
        return _skip("not opted in" if not labelled and not ctx.namespace_opted_in else "no GPU requested")
    notes = Notes()
    builder = PatchBuilder(doc)
    audit = policy.mode == "audit"
    try:
        if labelled or has_gpu:
            workload = _plan_gpu_pod(pod, builder, ctx, stateful, notes)
        else:
            workload = "none"
            place(pod, builder, policy, "forbid", "StatefulSet pods", notes)
    except LabelError as exc:
        return _refuse(str(exc), audit)
    return _finish(doc, builder, notes, workload, ctx, audit)


AUDIT_ANNOTATION_CHARS = 4096
"""The most of the change summary kept in an audit annotation: an audit event should not grow with a label's
length."""


def _finish(
    raw: dict[str, Any], builder: PatchBuilder, notes: Notes, workload: str, ctx: MutationContext, audit: bool
) -> Decision:
    summary = notes.summary() or "no change needed"
    if audit:
        # Record what would have happened, change nothing else: the canary step before enforcing.
        recorder = PatchBuilder(raw)
        recorder.set(ANNOTATIONS, contract.ANNOTATION_AUDIT, clip(f"{ctx.version}: {summary}", AUDIT_ANNOTATION_CHARS))
        return Decision(
            True,
            "audited",
            workload,
            recorder.ops(),
            notes.warnings("gpupack audit, would:"),
            {"would": clip(summary, AUDIT_ANNOTATION_CHARS)},
            summary,
            notes.kinds(),
            notes.unrouted,
        )
    builder.set_many(
        ANNOTATIONS, {contract.ANNOTATION_CLASS: workload, contract.ANNOTATION_POLICY_VERSION: ctx.version}
    )
    ops = builder.ops()
    return Decision(
        True,
        "mutated" if ops else "unchanged",
        workload,
        ops,
        notes.warnings("gpupack:"),
        {"changes": clip(summary, AUDIT_ANNOTATION_CHARS)} if notes.items else {},
        summary,
        notes.kinds(),
        notes.unrouted,
    )
