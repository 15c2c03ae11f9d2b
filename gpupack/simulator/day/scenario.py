"""The synthetic-day scenario: a YAML document naming a cluster's GPU node groups and the workloads of one day.

Field names are camelCase like the policy ConfigMap's and Kubernetes objects'; unknown fields are refused, so a
typo is an error naming the field rather than a silently ignored setting. `load_scenario` turns every problem into
one `ScenarioError` line such as `day.yaml: inference.0.peakReplicas: ...`. `scale` shrinks or grows node
counts, replica counts and arrival rates together, so tests run the shipped example small.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpupack.core import contract, yamldoc
from gpupack.core.gpus.geometry import LayoutError, check
from gpupack.core.gpus.stock import stock_for
from gpupack.core.policy import Policy, Sharing
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.core.validation import DOCUMENT_CONFIG, describe

GpuKind = Literal["a100-mig", "h100", "t4"]
DEFAULT_GPUS: dict[str, int] = {"a100-mig": 8, "h100": 8, "t4": 4}


NAMESPACE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
"""A Kubernetes namespace name (an RFC 1123 label)."""
MIG_MODEL = "A100-40GB"
"""The catalog model of an `a100-mig` group's GPUs: what its MIG layouts are checked against."""
DEFAULT_MIG_LAYOUT = "all-balanced"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
"""A Kubernetes label value: at most 63 characters, alphanumeric at both ends, `-_.` inside."""


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(**DOCUMENT_CONFIG, strict=True)
    """Strict: YAML already gives numbers, strings and booleans, so `gpus: true` or `count: "3"` is a mistake."""


class NodeGroup(_Model):
    """`count` identical GPU nodes named `<name>-1`, `<name>-2`...: what one cloud node pool provides."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
    count: int = Field(ge=0, le=1000)
    gpu: GpuKind
    """a100-mig: A100-40GB in a MIG layout (`migLayout`, default `all-balanced`); h100: whole H100s; t4: T4s
    time-sliced."""
    gpus: int | None = Field(default=None, ge=1, le=8)
    """GPUs per node (default 8 for A100 and H100, 4 for T4)."""
    replicas: int | None = Field(default=None, ge=2, le=64)
    """Time-sliced replicas per GPU (t4 only; default 4)."""
    mig_layout: str | list[dict[str, int]] | None = None
    """MIG layout (a100-mig only): a mig-parted stock name that applies to the A100-40GB (default `all-balanced`:
    per GPU 2x 1g.5gb, 1x 2g.10gb, 1x 3g.20gb), or one `{profile: count}` per GPU of the node, each a set of
    instances one GPU can hold (`gpupack.core.gpus.geometry.check`): what a planner's custom mig-parted config
    creates."""
    mig_config: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE)
    """The `nvidia.com/mig.config` label of an explicit `migLayout` list (the custom config's name); absent: the
    stock name the list amounts to, else one generated from its content."""
    spot: bool = False
    """A spot node: labelled and tainted `node-type=spot` (the policy's default spot label and taint), or as
    `provisioner` says."""
    provisioner: Literal["node-group", "karpenter"] = "node-group"
    """Who makes the group's nodes: a cloud node group (spot nodes labelled and tainted `node-type=spot`), or a
    Karpenter NodePool offering both capacity types (every node labelled `karpenter.sh/capacity-type`, spot or
    on-demand, and no spot taint: Karpenter adds none unless the NodePool asks)."""
    price_per_hour: float | None = Field(default=None, ge=0)
    """What one node costs an hour: with `autoscaling`, new nodes come from the cheapest group that takes the pod,
    as Karpenter chooses by price."""
    cpu: int = Field(default=94, ge=1)
    memory_gi: int = Field(default=900, ge=1)

    @model_validator(mode="after")
    def _kind_options(self) -> NodeGroup:
        if self.replicas is not None and self.gpu != "t4":
            raise ValueError(f"replicas applies to t4 (time-sliced) groups, not {self.gpu}")
        if self.mig_layout is not None and self.gpu != "a100-mig":
            raise ValueError(f"migLayout applies to a100-mig groups, not {self.gpu}")
        if self.mig_config is not None and not isinstance(self.mig_layout, list):
            raise ValueError("migConfig names an explicit migLayout list; a stock layout is named by migLayout")
        if isinstance(self.mig_layout, list) and len(self.mig_layout) != self.gpus_per_node:
            raise ValueError(
                f"migLayout lists {len(self.mig_layout)} GPU layouts for {self.gpus_per_node} GPUs per node"
            )
        return self

    @field_validator("mig_layout")
    @classmethod
    def _layout(cls, value: str | list[dict[str, int]] | None) -> str | list[dict[str, int]] | None:
        # Checked against the geometry here, so an impossible layout is a scenario error naming the GPU, not a
        # node that advertises instances no A100 can hold.
        if isinstance(value, str):
            known = stock_for(MIG_MODEL)
            if value not in known:
                raise ValueError(f"{value!r} is not a stock layout of the {MIG_MODEL}; known: {', '.join(known)}")
        elif value is not None:
            for index, counts in enumerate(value):
                try:
                    check(MIG_MODEL, counts)
                except LayoutError as exc:
                    raise ValueError(f"GPU {index}: {exc}") from exc
        return value

    @property
    def gpus_per_node(self) -> int:
        """GPUs of each node of the group."""
        return self.gpus or DEFAULT_GPUS[self.gpu]


class Spread(_Model):
    """A per-pod draw: a normal around `mean` with standard deviation `sd`, clipped to (0, 1]."""

    mean: float = Field(gt=0, le=1)
    sd: float = Field(default=0.0, ge=0, le=1)


class Duration(_Model):
    """How long a job runs once started: log-normal with this mean (minutes) and log-space sigma; 0 is fixed."""

    mean: float = Field(gt=0, le=7 * 24 * 60)
    sigma: float = Field(default=0.0, ge=0, le=3)


class Inference(_Model):
    """A Deployment whose replicas follow a daily cosine: `peakReplicas` at `peakHour`, `troughReplicas` 12 h off."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
    namespace: str = Field(default="ml-serving", pattern=NAMESPACE)
    peak_replicas: int = Field(ge=0, le=10_000)
    trough_replicas: int = Field(ge=0, le=10_000)
    peak_hour: float = Field(default=14.0, ge=0, lt=24)
    gpu_memory: str | None = None
    """The `gpupack.io/gpu-memory` label (sizes the MIG slice); absent: the class default applies."""
    gpu: GpuKind | None = None
    """The GPU model the team pins its pods to (a required node affinity on `nvidia.com/gpu.product`), with or
    without gpupack: without it, a pod asking for a whole GPU takes any model."""
    latency: Literal["critical", "tolerant"] = "critical"
    """The `gpupack.io/latency` label: tolerant replicas are time-sliced instead of getting a MIG slice."""
    utilization: Spread = Spread(mean=0.2, sd=0.06)
    """How busy each replica keeps what it holds (its MIG slice, its time-slice share or its GPUs), 0-1."""

    @field_validator("gpu_memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            ok = parse_quantity(value) > 0
        except QuantityError as exc:
            raise ValueError(str(exc)) from exc
        if not ok:
            raise ValueError(f"{value!r} must be greater than zero")
        return value

    @model_validator(mode="after")
    def _curve(self) -> Inference:
        if self.trough_replicas > self.peak_replicas:
            raise ValueError(f"troughReplicas ({self.trough_replicas}) exceeds peakReplicas ({self.peak_replicas})")
        return self


class OwnPriorityClass(_Model):
    """A PriorityClass a team's pods name themselves, with the value the API server resolves it to."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    value: int = Field(ge=-(2**31), le=1_000_000_000)
    """User-defined classes go up to one billion; the higher values are the system classes'."""


class Jobs(_Model):
    """Pods arriving as a Poisson process, each running for a drawn duration once bound, then leaving."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
    namespace: str = Field(default="ml-training", pattern=NAMESPACE)
    arrivals_per_hour: float = Field(ge=0, le=10_000)
    duration_minutes: Duration
    gpus: int | list[int] = 1
    """The `gpupack.io/gpus` label: a count, or a list drawn from uniformly per job."""
    gpu: GpuKind | None = None
    """The GPU model the team pins its pods to (a required node affinity on `nvidia.com/gpu.product`)."""
    sharing: Sharing | None = None
    """The `gpupack.io/sharing` label; absent: the class default (training exclusive, batch time-sliced)."""
    checkpoint: bool = False
    """The `gpupack.io/checkpoint` label."""
    checkpoint_minutes: float = Field(default=30.0, gt=0, le=24 * 60)
    """How often a checkpointing job saves its progress: preempted, it loses what it did since its last checkpoint,
    and one that does not checkpoint loses all it did."""
    utilization: Spread = Spread(mean=0.85, sd=0.08)
    gpupack_labels: bool = True
    """False: another team's pods, written without gpupack labels (whole `nvidia.com/gpu` limits, as
    `without_gpupack` writes them): the webhook leaves them alone and the preempt verb knows them by their priority
    only. The day still counts them under their section (training or batch)."""
    priority_class: OwnPriorityClass | None = None
    """A PriorityClass the pods name themselves; the webhook keeps it unless the policy enforces `priority`."""

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int | list[int]) -> int | list[int]:
        counts = value if isinstance(value, list) else [value]
        if not counts or any(not 1 <= n <= contract.MAX_GPUS for n in counts):
            raise ValueError(f"give a GPU count from 1 to {contract.MAX_GPUS}, or a non-empty list of them")
        return value

    @property
    def gpu_choices(self) -> list[int]:
        """The counts a job draws from."""
        return self.gpus if isinstance(self.gpus, list) else [self.gpus]


class Autoscaling(_Model):
    """Nodes come and go as a node autoscaler makes them (Karpenter, or Cluster Autoscaler on groups with `min:
    0`): every node starts absent; a pod that fits no present node brings up a node of the cheapest group that
    takes it (by `pricePerHour`, else in the scenario's order), present `provisionMinutes` later; a node empty for
    `emptyMinutes` goes. Each group's `count` is its limit. Without it, every node is there all day and the day
    counts the empty stretches longer than `emptyMinutes` as removable."""

    provision_minutes: float = Field(default=1.0, ge=0, le=24 * 60)
    """From the pod that needs it to the node taking pods (Karpenter's launch, registration and Ready)."""


class Scenario(_Model):
    """A cluster and one day of its workloads."""

    name: str = "synthetic-day"
    seed: int = Field(default=42, ge=0)
    hours: float = Field(default=24.0, gt=0, le=24 * 7)
    step_minutes: float = Field(default=1.0, gt=0, le=60)
    warmup_hours: float = Field(default=0.0, ge=0, le=48)
    """Simulated before the day and not measured, so the day starts with jobs already running."""
    scale: float = Field(default=1.0, gt=0, le=100)
    """Multiplies node counts, replicas and arrival rates (rounded; a non-zero count stays at least 1)."""
    empty_minutes: float = Field(default=10.0, gt=0, le=7 * 24 * 60)
    """Cluster Autoscaler's `--scale-down-unneeded-time`: a node empty this long is removable (with `autoscaling`,
    removed: Karpenter's `consolidateAfter` and its disruption loop)."""
    autoscaling: Autoscaling | None = None
    policy: dict[str, Any] = {}
    """A gpupack policy document (the ConfigMap's), applied to the runs with gpupack; `extender.scoring` is set per
    run. The run without gpupack reads only what it says of the cluster (spot label, time-slicing resource)."""
    nodes: list[NodeGroup] = Field(min_length=1)
    inference: list[Inference] = []
    training: list[Jobs] = []
    batch: list[Jobs] = []

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            Policy.model_validate(value)
        except ValidationError as exc:
            raise ValueError(describe(exc, limit=3)) from exc
        return value

    @model_validator(mode="after")
    def _distinct_names(self) -> Scenario:
        for what, names in (
            ("nodes", [g.name for g in self.nodes]),
            ("workloads", [w.name for w in self.inference] + [j.name for j in (*self.training, *self.batch)]),
        ):
            seen = {n for n in names if names.count(n) > 1}
            if seen:
                raise ValueError(f"{what}: name {sorted(seen)[0]!r} is used twice")
        if not any(g.count for g in self.nodes):
            raise ValueError("nodes: every group has count 0; the cluster needs at least one node")
        return self

    @property
    def steps(self) -> int:
        """Measured steps in the day."""
        return max(1, round(self.hours * 60 / self.step_minutes))

    @property
    def warmup_steps(self) -> int:
        """Steps simulated before the measured day."""
        return round(self.warmup_hours * 60 / self.step_minutes)

    def scaled_count(self, n: int) -> int:
        """`n` nodes or replicas at this scale: rounded, never below 1 when `n` is not 0."""
        return 0 if n == 0 else max(1, round(n * self.scale))

    def with_changes(self, **changes: Any) -> Scenario:
        """A validated copy with some top-level fields replaced (`scale=0.25`, `hours=6`...)."""
        data = self.model_dump(by_alias=False)
        data.update(changes)
        return parse_scenario(data, f"scenario {self.name}")


def replicas_at(workload: Inference, hour: float, scale: float) -> int:
    """The Deployment's replicas at `hour` (may be negative: the warm-up) on a cosine that peaks at `peakHour`."""
    peak = 0 if workload.peak_replicas == 0 else max(1, round(workload.peak_replicas * scale))
    trough = 0 if workload.trough_replicas == 0 else max(1, round(workload.trough_replicas * scale))
    phase = (1 + math.cos(2 * math.pi * (hour - workload.peak_hour) / 24)) / 2
    return round(trough + (peak - trough) * phase)


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    """Validate a scenario document; raises ScenarioError naming the first offending fields."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the scenario must be a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {describe(exc, limit=3)}") from exc


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; raises ScenarioError (and OSError when it cannot be read)."""
    try:
        data = yamldoc.load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a text file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from exc
    return parse_scenario(data, str(path))
