"""The policy cluster admins tune through a ConfigMap: one YAML document, validated here.

Every field has a default, so an empty document is a complete policy for a cluster that follows the guide
(docs/method.md): inference on the smallest MIG slice that fits and never on spot, training on whole GPUs preferring
spot when it checkpoints, batch time-sliced on spot at a low priority. Field names are camelCase on the wire, like
Kubernetes objects.
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from functools import cached_property
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpupack.core import contract, dcgm, spot, yamldoc
from gpupack.core.autoscalers import Autoscaler
from gpupack.core.gpus.catalog import CATALOG, DEFAULT_MIG_GPUS
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.core.thresholds import DEFAULT as THRESHOLDS
from gpupack.core.validation import DOCUMENT_CONFIG, describe

Sharing = Literal["mig", "time-slicing", "exclusive"]
SpotPlacement = Literal["require", "prefer", "forbid"]
WorkloadClass = Literal["inference", "training", "batch"]
EnforcedField = Literal["gpu", "requests", "spot", "priority", "autoscaler", "scheduler"]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_MIG_NAME = re.compile(r"^[0-9]+g\.[0-9]+gb$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _positive_quantity(text: str) -> str:
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    if value <= 0:
        raise ValueError(f"{text!r} must be greater than zero")
    return text


def _dns_subdomain(text: str) -> str:
    if not _DNS_SUBDOMAIN.match(text):
        raise ValueError(f"{text!r} is not a valid Kubernetes object name (lowercase DNS subdomain)")
    return text


MAX_ENTRIES = 1000
"""The most entries a policy list or map holds (PriorityClasses, MIG profiles, ignored namespaces, spot labels). Real
policies have a handful; the bound keeps a reload cheap to validate and to hand over (see `policy_store`)."""

Quantity = Annotated[str, AfterValidator(_positive_quantity)]
ObjectName = Annotated[str, AfterValidator(_dns_subdomain)]


class _Model(BaseModel):
    model_config = ConfigDict(**DOCUMENT_CONFIG, validate_default=True)


class ClassPolicy(_Model):
    """What one workload class gets."""

    sharing: Sharing
    """How the class uses GPUs: a MIG slice sized by `gpupack.io/gpu-memory`, a time-sliced replica, or whole GPUs."""
    priority_class_name: ObjectName | None
    """The PriorityClass set on the pod (with its value and preemption policy); null leaves priority alone."""
    spot: SpotPlacement
    """require: only spot nodes; prefer: spot first, on-demand when none fits; forbid: never spot."""
    cpu: Quantity
    """CPU request given to every container that has none (capped by the container's limit)."""
    memory: Quantity
    """Memory request given to every container that has none (capped by the container's limit)."""
    default_gpu_memory: Quantity = "10Gi"
    """GPU memory assumed when a MIG pod has no `gpupack.io/gpu-memory` label."""
    safe_to_evict: bool = True
    """False keeps the node autoscalers (`autoscalers`) from evicting the class's pods unless they checkpoint:
    `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`, `karpenter.sh/do-not-disrupt: "true"`."""
    spot_needs_checkpoint: bool = False
    """True keeps the class's pods off spot (`forbid`) unless they checkpoint (`gpupack.io/checkpoint: "true"`): a
    spot interruption costs a job that cannot resume all its work so far. Training's default."""

    def spot_for(self, checkpoint: bool) -> SpotPlacement:
        """The spot placement the webhook gives one of the class's pods: `spot`, or `forbid` for a pod that does not
        checkpoint when `spotNeedsCheckpoint` is set. (The extender's spot filter keeps to `spot`: the webhook's
        required node affinity carries this rule to kube-scheduler, and a pod that selects spot itself keeps it.)"""
        if self.spot_needs_checkpoint and not checkpoint and self.spot != "forbid":
            return "forbid"
        return self.spot


_CLASS_DEFAULTS: dict[str, ClassPolicy] = {
    "inference": ClassPolicy(
        sharing="mig", priority_class_name="gpupack-inference", spot="forbid", cpu="1", memory="4Gi"
    ),
    "training": ClassPolicy(
        sharing="exclusive",
        priority_class_name="gpupack-training",
        spot="prefer",
        cpu="4",
        memory="16Gi",
        safe_to_evict=False,
        spot_needs_checkpoint=True,
    ),
    "batch": ClassPolicy(
        sharing="time-slicing", priority_class_name="gpupack-batch", spot="require", cpu="1", memory="2Gi"
    ),
}


class Classes(_Model):
    """One entry per workload class; a class given partly keeps the defaults of the fields it omits."""

    inference: ClassPolicy = _CLASS_DEFAULTS["inference"]
    training: ClassPolicy = _CLASS_DEFAULTS["training"]
    batch: ClassPolicy = _CLASS_DEFAULTS["batch"]

    @model_validator(mode="before")
    @classmethod
    def _merge_with_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        merged: dict[str, Any] = {}
        for name, value in data.items():
            default = _CLASS_DEFAULTS.get(name)
            if default is not None and isinstance(value, dict):
                merged[name] = {**default.model_dump(by_alias=True), **value}
            else:
                merged[name] = value
        return merged

    def of(self, name: WorkloadClass) -> ClassPolicy:
        """The policy of a class by its label value."""
        policy: ClassPolicy = getattr(self, name)
        return policy


class PriorityValue(_Model):
    """A PriorityClass as gpupack's manifests create it; used when the API cannot be read."""

    value: int = Field(ge=-2_000_000_000, le=1_000_000_000)
    """The PriorityClass's value: pods of higher value are scheduled first and may preempt lower ones (the range
    the API server allows user classes)."""
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    """`Never`: pods of the class wait for room instead of preempting (batch, which is made to yield)."""


class MigProfileSpec(_Model):
    """A MIG profile the cluster offers, as the device plugin names it (`mixed` strategy)."""

    name: str = Field(pattern=_MIG_NAME.pattern)
    """Profile name, e.g. `1g.10gb`; the resource is `nvidia.com/mig-<name>`."""
    memory: Quantity
    """GPU memory of one instance, compared with `gpupack.io/gpu-memory`."""
    compute_slices: int = Field(ge=1, le=8)
    """Compute slices of one instance: the tie-breaker between profiles of equal memory."""
    gpu: str = ""
    """GPU model the profile belongs to (informational)."""

    @cached_property
    def resource(self) -> str:
        """The extended resource name (made once: sizing compares it on every admission)."""
        return contract.mig_resource(self.name)

    @cached_property
    def memory_bytes(self) -> Decimal:
        """Memory in bytes (parsed once: sizing compares it on every admission)."""
        return parse_quantity(self.memory)


_DEFAULT_PRIORITIES: dict[str, PriorityValue] = {
    "gpupack-inference": PriorityValue(value=100000),
    "gpupack-training": PriorityValue(value=10000),
    "gpupack-batch": PriorityValue(value=-100, preemption_policy="Never"),
}


def _default_mig_profiles() -> list[MigProfileSpec]:
    return [
        MigProfileSpec(name=p.name, memory=f"{p.memory_gb}Gi", compute_slices=p.compute_slices, gpu=p.gpu)
        for gpu in DEFAULT_MIG_GPUS
        for p in CATALOG[gpu]
    ]


class TimeSlicing(_Model):
    """Time-sliced GPU sharing, as the device plugin advertises it."""

    resource_name: str = Field(
        default=contract.RESOURCE_GPU_SHARED,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    )
    """Resource of one time-sliced replica (`renameByDefault: true` gives `nvidia.com/gpu.shared`): an extended
    resource name, `domain/name` (`cpu` or an empty name would count CPU or nothing as GPU replicas)."""


def _label_key(text: str) -> str:
    """A label (or taint) key as the API server validates it: an optional DNS subdomain prefix and `/`, then a name
    of at most 63 characters, alphanumeric at both ends with `-`, `_` and `.` inside."""
    prefix, _, name = text.rpartition("/")
    if (prefix and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix))) or not _LABEL_NAME.match(name):
        raise ValueError(
            f"{text!r} is not a label key: [prefix/]name, the prefix a lowercase DNS subdomain, the name 1-63 "
            "characters, alphanumeric at both ends with '-', '_' or '.' inside"
        )
    return text


class NodeLabel(_Model):
    """A node label key and value."""

    key: Annotated[str, AfterValidator(_label_key)]
    """The label (or taint) key, e.g. `node-type` or `cloud.google.com/gke-spot`."""
    value: str = Field(pattern=_LABEL_VALUE.pattern, max_length=63)
    """Its value on spot nodes, e.g. `spot` or `true`."""


class NodeTaint(NodeLabel):
    """A node taint, tolerated by pods allowed on spot."""

    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    """The taint's effect, as the spot node pool sets it (the toleration gpupack writes names it)."""


class SpotPolicy(_Model):
    """How spot nodes are recognised: Karpenter's and the clouds' own labels out of the box (`wellKnown`), and the
    cluster's own. `forbid` excludes every recognised label, `require` selects any of them, `prefer` weighs each."""

    well_known: bool = True
    """Recognise the labels Karpenter and the clouds put on spot nodes (`karpenter.sh/capacity-type: spot`,
    `eks.amazonaws.com/capacityType: SPOT`, `cloud.google.com/gke-spot: "true"`,
    `cloud.google.com/gke-preemptible: "true"`, `kubernetes.azure.com/scalesetpriority: spot`) and tolerate their
    spot taints (AKS's `kubernetes.azure.com/scalesetpriority=spot`, GKE's `cloud.google.com/gke-spot=true`)."""
    labels: list[NodeLabel] = Field(default=[NodeLabel(key="node-type", value="spot")], max_length=MAX_ENTRIES)
    """The cluster's own labels for spot nodes, recognised beside the well-known ones."""
    taints: list[NodeTaint] = Field(default=[NodeTaint(key="node-type", value="spot")], max_length=MAX_ENTRIES)
    """The cluster's own taints on spot nodes, tolerated by `require` and `prefer` pods beside the well-known ones;
    empty when its spot nodes are untainted."""
    prefer_weight: int = Field(default=80, ge=1, le=100)
    """Weight of each preferred node affinity term written for `prefer` (one per recognised label key)."""

    @model_validator(mode="before")
    @classmethod
    def _singular_forms(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in (("label", "labels"), ("taint", "taints")):
                if old in data:
                    raise ValueError(f"{old} is now {new}, a list (the well-known spot labels are recognised too)")
        return data

    @cached_property
    def recognised(self) -> tuple[tuple[str, str], ...]:
        """(key, value) of every label that marks a spot node: the well-known ones first (Karpenter tries a pod's
        required node affinity terms in order), then the cluster's own."""
        own = tuple((label.key, label.value) for label in self.labels)
        found = (*spot.WELL_KNOWN_LABELS, *own) if self.well_known else own
        return tuple(dict.fromkeys(found))

    @cached_property
    def tolerated(self) -> tuple[tuple[str, str, str], ...]:
        """(key, value, effect) of every spot taint that `require` and `prefer` pods tolerate."""
        own = tuple((taint.key, taint.value, taint.effect) for taint in self.taints)
        found = (*own, *spot.WELL_KNOWN_TAINTS) if self.well_known else own
        return tuple(dict.fromkeys(found))


class ClusterFacts(_Model):
    """How gpupack reads PriorityClasses and node MIG resources from the API."""

    refresh_seconds: float = Field(default=30.0, gt=0, le=3600)
    """Period of the background list of PriorityClasses and nodes."""
    remember_seconds: float = Field(default=7 * 86400.0, ge=0, le=90 * 86400)
    """How long a GPU resource a node advertised still counts as offered once no node advertises it: an autoscaler
    removes a pool's last node when its pods are gone, and the next pod must still be sized for that pool. Until
    some node has advertised one (or a Karpenter NodeOverlay offers one), the policy's `migProfiles` stand."""


ScoringPolicy = Literal["gpupack", "spread", "binpack"]


class ScoreWeights(_Model):
    """Relative weights of the three terms of the `gpupack` score (only their ratios matter)."""

    packing: float = Field(default=1.0, ge=0)
    """How full the node's GPUs would be with the pod: packs pods onto nodes already in use."""
    load: float = Field(default=1.0, ge=0)
    """Live utilization of the node's best GPU, shaped to peak at `targetUtilization` (shared GPUs only)."""
    fragmentation: float = Field(default=1.0, ge=0)
    """Prefers MIG instances on GPUs already split and in use over splitting an intact GPU."""

    @model_validator(mode="after")
    def _some_weight(self) -> ScoreWeights:
        if self.packing + self.load + self.fragmentation <= 0:
            raise ValueError("at least one weight must be greater than zero")
        return self


_PROM_DURATION = r"^[0-9]+(ms|s|m|h|d|w|y)$"


class MetricsPolicy(_Model):
    """Where the extender reads live DCGM exporter data and how old it may be."""

    node_label: str | None = None
    """Series label that holds the node name; null tries `Hostname`, then `hostname` (dcgm-exporter renamed it)."""
    window: str = Field(default="5m", pattern=_PROM_DURATION)
    """Averaging window substituted for `{window}` in the queries."""
    gpu_util_query: str = f"avg_over_time({dcgm.GPU_UTIL}[{{window}}])"
    """Whole-GPU utilization, 0-100 (not reported for MIG instances)."""
    mig_active_query: str = f"avg_over_time({dcgm.GR_ENGINE_ACTIVE}[{{window}}])"
    """Graphics engine activity of MIG instances (and whole GPUs), 0-1."""
    fb_used_query: str = dcgm.FB_USED
    """Framebuffer memory used, MiB."""
    fb_free_query: str = dcgm.FB_FREE
    """Framebuffer memory free, MiB."""
    poll_seconds: float = Field(default=15.0, gt=0, le=3600)
    """Period of the background read (never on the request path)."""
    max_age_seconds: float = Field(default=120.0, gt=0)
    """Samples older than this are ignored: the node scores neutral, and is never filtered for lack of data."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    """Timeout of one Prometheus query."""

    def query(self, template: str) -> str:
        """A query with the window substituted."""
        return template.replace("{window}", self.window)


class ExtenderPolicy(_Model):
    """How the scheduler extender filters and scores nodes."""

    scoring: ScoringPolicy = "gpupack"
    """spread: least allocated (the default scheduler); binpack: most allocated; gpupack: pack against fragmentation
    and by live load (see `extender.score`)."""
    hot_threshold: float = Field(default=THRESHOLDS.hot / 100, gt=0, le=1)
    """Latency-critical inference skips nodes whose every GPU is busier than this (0-1): the hot level of the report
    and the alerts (`gpupack.core.thresholds`), 85 %."""
    target_utilization: float = Field(default=0.6, gt=0, lt=1)
    """Live GPU utilization the `gpupack` score packs shared inference up to; the score falls beyond it."""
    weights: ScoreWeights = ScoreWeights()
    keep_empty_nodes: bool = True
    """`gpupack` puts GPU nodes with no GPU requested last (unless the pod fills one), so Cluster Autoscaler can
    remove them. False for a fixed cluster, where an empty node saves nothing and packing by fragmentation alone
    places more GPU work (the Alibaba trace protocol)."""
    assume_seconds: float = Field(default=30.0, gt=0, le=600)
    """How long a pod ranked first for a node counts against it before it shows up bound."""
    metrics: MetricsPolicy = MetricsPolicy()


_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class LeaseName(_Model):
    """Where the gpupack scheduler's leader election keeps its Lease: `leaderElection.resourceNamespace` and
    `resourceName` of manifests/extender/scheduler-config.yaml."""

    namespace: str = Field(default="gpupack-system", pattern=_DNS_LABEL)
    """Namespace of the Lease (a namespace name: a DNS label)."""
    name: ObjectName = "gpupack-scheduler"
    """Name of the Lease."""


LEASE_SECONDS = 15
"""kube-scheduler's default `leaseDuration`, the shipped configuration's."""


class SchedulerPolicy(_Model):
    """Which scheduler opted-in GPU pods are sent to (`spec.schedulerName`), and how the webhook knows it is alive.

    Labels alone route nothing: a second scheduler takes only the pods that name it. A pod that names a scheduler
    nobody runs stays Pending forever, so pods are sent to it only while its leader Lease is held and renewed;
    otherwise they stay on `default-scheduler` (running, not packed) with a warning, a metric and a log line.
    """

    name: ObjectName | None = "gpupack-scheduler"
    """The `schedulerName` given to opted-in GPU pods while that scheduler has a live leader: the profile of the
    shipped gpupack scheduler. A pod naming `default-scheduler` (what the API server writes when it names none) is
    routed; one naming another scheduler keeps it, with a warning, unless `enforce` has `scheduler`. Null turns
    routing off (no Lease is read), for clusters whose main scheduler calls the extender; `default-scheduler` is
    refused."""
    lease: LeaseName = LeaseName()
    """The scheduler's leader-election Lease; the webhook's RBAC lets it `get` only this one."""
    grace_seconds: float = Field(default=10.0, ge=0, le=300)
    """How long past `renewTime + leaseDurationSeconds` the scheduler still counts as alive. The leader renews
    every 2 s and the Lease lasts 15 s (kube-scheduler's defaults); the webhook sees a renewal up to
    `pollSeconds` late, and the two clocks may differ. 10 s covers one poll and a few seconds of skew, and it
    spans a failover (a standby takes the Lease about 15-17 s after the last renewal), so a leader change does
    not send pods away. A dead scheduler is noticed at most 25 s after its last renewal."""
    poll_seconds: float = Field(default=5.0, gt=0, le=60)
    """Period of the background read of the Lease (one GET; never on the request path). Keep it well under
    `graceSeconds` plus the Lease's duration, or a live scheduler looks dead between two reads."""

    @model_validator(mode="after")
    def _polled_often_enough(self) -> SchedulerPolicy:
        if self.poll_seconds >= LEASE_SECONDS + self.grace_seconds:
            raise ValueError(
                f"pollSeconds ({self.poll_seconds:g}) must be shorter than the Lease's {LEASE_SECONDS} s plus "
                f"graceSeconds ({self.grace_seconds:g}), or a live scheduler looks dead between two reads"
            )
        return self

    @field_validator("name")
    @classmethod
    def _not_the_default(cls, value: str | None) -> str | None:
        if value == contract.DEFAULT_SCHEDULER:
            raise ValueError(f"{value!r} is where pods go anyway: use null to turn routing off")
        return value


class DraPolicy(_Model):
    """GPUs from DRA drivers (docs/platform/dra.md)."""

    memory_sizing: bool = False
    """Size a pod by `gpupack.io/gpu-memory` with a ResourceClaim instead of a MIG resource name: the pod references
    the ResourceClaimTemplate `gpupack-gpu-<memory>` of the smallest profile that holds it, whose prioritized list
    asks for that profile's MIG device, then each larger profile, then a whole GPU with that much memory, on any GPU
    model. Needs NVIDIA's DRA driver on the GPU nodes and the templates in the pod's namespace (the chart's
    `dra.claimTemplateNamespaces`, or `manifests/dra/claimtemplates.yaml`). Off: pods get the MIG resource name of
    one model's profile, as device plugins and DeviceClasses with `extendedResourceName` serve it."""


class Policy(_Model):
    """The whole policy document."""

    mode: Literal["enforce", "audit"] = "enforce"
    """`audit` computes every change and applies none: it records what it would do in the annotation
    `gpupack.io/audit`, in warnings (`gpupack audit, would: ...`), the metric
    `gpupack_webhook_mutations_total{mode="audit"}` and a log line, and admits invalid labels with a "would refuse"
    warning. The canary step before `enforce`."""
    default_class: WorkloadClass = "inference"
    """Class of GPU pods in a namespace labelled `gpupack.io/enabled: "true"` that carry no workload label."""
    classes: Classes = Classes()
    priority_classes: dict[ObjectName, PriorityValue] = Field(default=_DEFAULT_PRIORITIES, max_length=MAX_ENTRIES)
    """Values of PriorityClasses, used when the API is not reachable (the manifests create the same).
    Entries given are added to the defaults."""
    mig_profiles: list[MigProfileSpec] = Field(
        default_factory=_default_mig_profiles, min_length=1, max_length=MAX_ENTRIES
    )
    """MIG profiles offered; when the API is reachable, only those some node advertises (or a Karpenter
    NodeOverlay adds to the instance types it may buy) are used. A pod gets the smallest that holds its
    `gpupack.io/gpu-memory`: least memory, then fewest compute slices."""
    time_slicing: TimeSlicing = TimeSlicing()
    spot: SpotPolicy = SpotPolicy()
    tolerate_gpu_taints: bool = True
    """Tolerate, on every GPU pod, the taints GPU node pools carry for GPU pods only: `nvidia.com/gpu` (GKE's, and
    many clusters'), and one keyed by the GPU resource the pod gets, as the ExtendedResourceToleration admission
    plugin would (it runs before webhooks, so it never sees the resource gpupack writes). `NoSchedule`,
    `Exists`."""
    autoscalers: list[Autoscaler] = Field(default=["cluster-autoscaler", "karpenter"], max_length=2)
    """The node autoscalers gpupack speaks to: the annotations that keep pods of `safeToEvict: false` classes from
    being disrupted are written for these (Cluster Autoscaler's `safe-to-evict`, Karpenter's `do-not-disrupt`),
    and the report names their scale-down blockers. Both by default: an annotation the cluster's autoscaler does
    not read changes nothing; empty writes none."""
    gpupack_namespace: ObjectName = "gpupack-system"
    """gpupack's own namespace: never touched, like `kube-system`."""
    ignored_namespaces: list[ObjectName] = Field(default=[], max_length=MAX_ENTRIES)
    """More namespaces never touched."""
    enforce: list[EnforcedField] = []
    """Fields where the policy wins over what the pod says (by default the pod's own GPU resource, requests,
    node selector, PriorityClass, safe-to-evict annotation and `schedulerName` win, with a warning). With
    `scheduler`, a pod's own `schedulerName` is replaced by the routing rule: `scheduler.name` while it has a live
    leader, else `default-scheduler`."""
    cluster: ClusterFacts = ClusterFacts()
    extender: ExtenderPolicy = ExtenderPolicy()
    scheduler: SchedulerPolicy = SchedulerPolicy()
    dra: DraPolicy = DraPolicy()

    @field_validator("priority_classes", mode="before")
    @classmethod
    def _add_default_priorities(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {**{k: v.model_dump(by_alias=True) for k, v in _DEFAULT_PRIORITIES.items()}, **data}
        return data

    @model_validator(mode="after")
    def _distinct_profiles(self) -> Policy:
        memory: dict[str, Decimal] = {}  # one pass: a pairwise check took 33 s on a 1 MiB list of profiles
        for profile in self.mig_profiles:
            if memory.setdefault(profile.name, profile.memory_bytes) != profile.memory_bytes:
                raise ValueError(f"migProfiles: {profile.name} is listed with different memory sizes")
        return self

    @cached_property
    def never_touched(self) -> frozenset[str]:
        """Namespaces the webhook admits untouched, whatever their labels."""
        return frozenset({"kube-system", self.gpupack_namespace, *self.ignored_namespaces})

    @cached_property
    def profiles_by_size(self) -> tuple[MigProfileSpec, ...]:
        """MIG profiles, smallest first: least memory, then fewest compute slices, then name."""
        return tuple(sorted(self.mig_profiles, key=lambda p: (p.memory_bytes, p.compute_slices, p.name)))

    def enforces(self, field: EnforcedField) -> bool:
        """Whether the policy overrides the pod's own value of `field`."""
        return field in self.enforce


class PolicyError(ValueError):
    """A policy document that cannot be used; the message names the field and the problem."""


MAX_POLICY_BYTES = 1024 * 1024
"""The largest policy read: a ConfigMap holds at most 1 MiB of data, so a larger file is not a policy anyone
mounted (and parsing YAML costs about a second per MiB)."""


def policy_version(raw: bytes) -> str:
    """A short content digest: two files with the same bytes are the same version."""
    return hashlib.sha256(raw).hexdigest()[:12]


def parse_policy(raw: bytes, source: str = "policy", empty_is_default: bool = True) -> Policy:
    """Parse and validate a policy document. An empty document (blank, `null` or only comments) gives the
    defaults, unless `empty_is_default` is False: a reload to an empty file is far more likely a ConfigMap
    emptied by mistake than a wish to drop every setting (`{}` says that), and would silently switch an `audit`
    cluster to `enforce`.

    Raises PolicyError naming the first offending fields, e.g.
    `policy.yaml: classes.inference.spot: Input should be 'require', 'prefer' or 'forbid'`, a key given twice,
    or a document over MAX_POLICY_BYTES.
    """
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(f"{source}: {len(raw)} bytes is larger than a ConfigMap can hold ({MAX_POLICY_BYTES})")
    try:
        data: Any = yamldoc.load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own bound, at 1,000 levels
            raise PolicyError(f"{source}: not a policy: nested too deeply") from exc
        raise PolicyError(f"{source}: not valid YAML: {exc}".replace("\n", " ")) from exc
    except RecursionError as exc:  # thousands of nested brackets: PyYAML's Python constructor recurses
        raise PolicyError(f"{source}: not a policy: nested too deeply") from exc
    if data is None:
        if not empty_is_default:
            raise PolicyError(
                f"{source}: the document is empty (blank, null or only comments); write {{}} to mean the defaults"
            )
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the policy must be a YAML mapping, got {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = describe(exc, limit=5)
        raise PolicyError(f"{source}: {problems}") from exc
