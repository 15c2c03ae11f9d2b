"""Partial Kubernetes models: only the fields gpupack reads; everything else stays in the raw object.

Models are msgspec Structs with the API's camelCase names (`rename="camel"`); fields they do not declare are
skipped when decoding, so a field added by a newer API server is not rejected, and the many fields gpupack
does not read (image, env, managedFields...) cost only a scan, not objects. They are read-only views: the
webhook patches the pod by path, never by re-serialising a model (a re-serialised partial model would drop
what it does not know). `document(pod)` gives the JSON form of what a model holds, against which the patch is
computed: every path the planner reads or patches is in it, and absent or null fields are left out, as in the
raw object.

Reading is strict, with the API's JSON types (a number where a string belongs is refused, not converted), and
`read_pod` / `decode_pod` raise InvalidPod naming the first bad field: `spec.containers: Expected `array`,
got `int``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gpupack.core.validation import describe_msgspec


class InvalidPod(ValueError):
    """The object is not a Pod gpupack can read; the message names the field and the problem."""


class _K8s(msgspec.Struct, rename="camel", omit_defaults=True):
    pass


class OwnerReference(_K8s):
    """Who controls the object (a ReplicaSet, a StatefulSet, a Job...)."""

    kind: str
    api_version: str = ""
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
    """Requests and limits of a container (quantities kept as they are written)."""

    requests: dict[str, str | int | float] | None = None
    limits: dict[str, str | int | float] | None = None
    claims: list[dict[str, Any]] | None = None
    """The pod's ResourceClaims the container uses (DRA): kept, so a patch adding requests never drops them."""


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
    """The pod spec fields gpupack reads; affinity stays a raw mapping because it is patched by path (its shape
    is checked by `check_node_affinity`)."""

    containers: Annotated[list[Container], msgspec.Meta(min_length=1)]
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    preemption_policy: str | None = None
    scheduler_name: str | None = None
    resource_claims: list[dict[str, Any]] | None = None
    """The pod's ResourceClaims (DRA), by name and template or claim: the webhook adds its own beside them."""


class Pod(_K8s):
    """A Pod as an admission request carries it."""

    spec: PodSpec
    metadata: ObjectMeta | None = None

    @property
    def labels(self) -> dict[str, str]:
        """Labels, empty when absent."""
        return (self.metadata.labels if self.metadata else None) or {}

    @property
    def annotations(self) -> dict[str, str]:
        """Annotations, empty when absent."""
        return (self.metadata.annotations if self.metadata else None) or {}

    @property
    def namespace(self) -> str | None:
        """`metadata.namespace`, if any."""
        return self.metadata.namespace if self.metadata else None

    def controller_kind(self) -> str | None:
        """Kind of the controlling owner (`StatefulSet`, `ReplicaSet`, `Job`...), if any."""
        for ref in (self.metadata.owner_references if self.metadata else None) or []:
            if ref.controller:
                return ref.kind
        return None


_POD_JSON = msgspec.json.Decoder(Pod)


def _checked(pod: Pod) -> Pod:
    try:
        check_node_affinity(pod.spec.affinity)
    except ValueError as exc:
        raise InvalidPod(f"spec.affinity: {exc}") from exc
    return pod


def read_pod(raw: Any) -> Pod:
    """The Pod in a decoded JSON object; raises InvalidPod naming the first bad field."""
    try:
        pod = msgspec.convert(raw, Pod)
    except msgspec.ValidationError as exc:
        raise InvalidPod(describe_msgspec(exc)) from exc
    return _checked(pod)


def decode_pod(data: bytes | msgspec.Raw) -> Pod:
    """The Pod in JSON text, decoding only the fields it declares. Raises InvalidPod for a JSON object that is
    not such a Pod, and msgspec.DecodeError or RecursionError for text that does not decode: a caller that must
    say why decodes the text itself and calls `read_pod`."""
    try:
        pod = _POD_JSON.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidPod(describe_msgspec(exc)) from exc
    return _checked(pod)


def document(pod: Pod) -> dict[str, Any]:
    """The pod's JSON form as far as the model holds it (fields absent or null are left out)."""
    doc: dict[str, Any] = msgspec.to_builtins(pod)
    return doc


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
