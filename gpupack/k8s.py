"""Partial Kubernetes models: only the fields gpupack reads; everything else stays in the raw object.

Models use the API's camelCase names through aliases and `extra="ignore"`, so a field added by a newer API
server is not rejected. They are read-only views: the webhook patches the raw object by path, never by
re-serialising a model (a re-serialised partial model would drop what it does not know), so nothing is lost
by ignoring the rest. Not keeping the unknown fields (`extra="allow"`) makes validating an admitted pod about
a third faster: a pod carries many more fields (image, env, managedFields...) than gpupack reads.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
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
    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    preemption_policy: str | None = None


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
