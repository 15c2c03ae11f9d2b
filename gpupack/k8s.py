"""Partial Kubernetes models: only the fields gpupack reads; everything else stays in the raw object.

Models use the API's camelCase names through aliases and `extra="ignore"`, so a field added by a newer API
server is not rejected. They are read-only views: the webhook patches the raw object by path, never by
re-serialising a model (a re-serialised partial model would drop what it does not know), so nothing is lost
by ignoring the rest. Not keeping the unknown fields (`extra="allow"`) makes validating an admitted pod about
a third faster: a pod carries many more fields (image, env, managedFields...) than gpupack reads.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


class _K8s(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class OwnerReference(_K8s):
    """Who controls the object (a ReplicaSet, a StatefulSet, a Job...)."""

    api_version: str = ""
    kind: str
    name: str = ""
    controller: bool | None = None


class ObjectMeta(_K8s):
    """The metadata fields gpupack reads."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None


class ResourceRequirements(_K8s):
    """Requests and limits of a container (quantities kept as strings)."""

    requests: dict[str, str | int | float] | None = None
    limits: dict[str, str | int | float] | None = None


class Container(_K8s):
    """A container; `restartPolicy: Always` on an init container makes it a sidecar."""

    name: str
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class Toleration(_K8s):
    """A toleration."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class PodSpec(_K8s):
    """The pod spec fields gpupack reads; affinity stays a raw mapping because it is patched by path."""

    containers: list[Container] = Field(min_length=1)
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None

    @field_validator("affinity")
    @classmethod
    def _node_affinity_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        check_node_affinity(value)
        return value

    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    preemption_policy: str | None = None
    scheduler_name: str | None = None


class Pod(_K8s):
    """A Pod as an admission request carries it."""

    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec

    @property
    def labels(self) -> dict[str, str]:
        """Labels, empty when absent."""
        return self.metadata.labels or {}

    @property
    def annotations(self) -> dict[str, str]:
        """Annotations, empty when absent."""
        return self.metadata.annotations or {}

    def controller_kind(self) -> str | None:
        """Kind of the controlling owner (`StatefulSet`, `ReplicaSet`, `Job`...), if any."""
        for ref in self.metadata.owner_references or []:
            if ref.controller:
                return ref.kind
        return None


REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_AFFINITY = "preferredDuringSchedulingIgnoredDuringExecution"


def check_node_affinity(affinity: dict[str, Any] | None) -> None:
    """Raise ValueError naming the part of `affinity.nodeAffinity` whose JSON type is wrong.

    The webhook reads and patches node affinity as raw JSON (so fields it does not know survive), and the API
    server hands it objects already decoded into Go structs; a hand-made request can still send `5` where a
    list belongs, which must be refused by name rather than fail inside the placement code.
    """
    node = (affinity or {}).get("nodeAffinity")
    if node is None:
        return
    _expect(node, dict, "nodeAffinity")
    required = node.get(REQUIRED_AFFINITY)
    if required is not None:
        where = f"nodeAffinity.{REQUIRED_AFFINITY}"
        _expect(required, dict, where)
        terms = required.get("nodeSelectorTerms")
        _expect(terms, list, f"{where}.nodeSelectorTerms", optional=True)
        for i, term in enumerate(terms or []):
            _check_term(term, f"{where}.nodeSelectorTerms[{i}]")
    preferred = node.get(PREFERRED_AFFINITY)
    _expect(preferred, list, f"nodeAffinity.{PREFERRED_AFFINITY}", optional=True)
    for i, item in enumerate(preferred or []):
        where = f"nodeAffinity.{PREFERRED_AFFINITY}[{i}]"
        _expect(item, dict, where)
        if item.get("preference") is not None:
            _check_term(item["preference"], f"{where}.preference")


def _check_term(term: Any, where: str) -> None:
    _expect(term, dict, where)
    expressions = term.get("matchExpressions")
    _expect(expressions, list, f"{where}.matchExpressions", optional=True)
    for j, expression in enumerate(expressions or []):
        _expect(expression, dict, f"{where}.matchExpressions[{j}]")
        values = expression.get("values")
        _expect(values, list, f"{where}.matchExpressions[{j}].values", optional=True)
        if values and not all(isinstance(v, str) for v in values):
            raise ValueError(f"{where}.matchExpressions[{j}].values must be a list of strings")


def _expect(value: Any, kind: type, where: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, kind):
        raise ValueError(f"{where} must be {'an object' if kind is dict else 'a list'}")
