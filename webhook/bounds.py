"""How large a pod gpupack plans: counts of the lists and maps the planner reads, checked on the raw object before
any validation.

The API server calls webhooks before it validates or stores an object, so a review may carry a pod no cluster
would keep: measured on 2026-12-01, a 3 MiB review of a pod with 171,000 containers took 3.9 s to plan and answer
(a 23.8 MB patch of CPU and memory requests), and since decoding, validating and planning hold the interpreter
lock, every other admission waited as long. A worker thread would not help: the JSON decoder and pydantic run in
C and Rust without releasing the lock. So gpupack bounds what it plans instead. The bounds are far above any real
pod (Kubernetes itself sets none for these counts, but a pod's object must fit in etcd's 1.5 MiB), and checking
them is a few `len()` calls. What stays is the decoding of the body itself, bounded by the 3 MiB body limit: about
15-50 ms in C for the worst shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

MAX_CONTAINERS: Final = 128
"""Containers plus init containers. Pods with sidecars injected by a mesh, a logger and a profiler have about
ten."""
MAX_RESOURCES: Final = 64
"""Entries in one container's requests or limits."""
MAX_TOLERATIONS: Final = 256
MAX_TERMS: Final = 64
"""Required node selector terms, or preferred scheduling terms, each."""
MAX_EXPRESSIONS: Final = 1024
"""Match expressions and match fields over all node affinity terms."""
MAX_VALUES: Final = 4096
"""Values over all node affinity match expressions."""
MAX_OWNERS: Final = 64
MAX_REVIEW_VALUES: Final = 100_000
"""JSON values a review of 64 KiB or more may hold, counted before it is decoded (`gpupack.core.jsonbound`). A pod at
every other bound here, with dozens of environment variables per container, has tens of thousands; decoding
100,000 takes about 10 ms, the 465,000 of 3 MiB of labels 45-55 ms, which every other admission waited for."""
MAX_LABELS: Final = 1024
"""Labels, annotations, and node selector entries, each."""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _size(value: Any, kind: type[dict[str, Any]] | type[list[Any]]) -> int:
    """How many entries `value` has if it is of `kind` (a dict or a list), else 0."""
    return len(value) if isinstance(value, kind) else 0


def _affinity_expressions(spec: dict[str, Any]) -> Iterator[tuple[str, list[Any]]]:
    """(where, expressions) of every node affinity term, required then preferred."""
    node = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    required = _list(_dict(node.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    preferred = _list(node.get("preferredDuringSchedulingIgnoredDuringExecution"))
    for term in required:
        term = _dict(term)
        yield "required", _list(term.get("matchExpressions")) + _list(term.get("matchFields"))
    for item in preferred:
        term = _dict(_dict(item).get("preference"))
        yield "preferred", _list(term.get("matchExpressions")) + _list(term.get("matchFields"))


def _over(what: str, count: int, bound: int) -> str:
    return f"the pod has {count} {what}; gpupack plans pods with at most {bound}"


def too_large(raw: dict[str, Any]) -> str | None:
    """What makes the pod larger than gpupack plans, in words, or None when it is within every bound. The first
    part over its bound is named, in this order: labels, annotations, owners, containers, each container's
    requests and limits, tolerations, node selector, required and preferred node affinity terms, their match
    expressions, their values.

    Parts of the wrong JSON type count as empty here: the pod model then names them as malformed. This runs on
    every admission, so it counts with `len()` and builds words only for a part over its bound.
    """
    metadata, spec = _dict(raw.get("metadata")), _dict(raw.get("spec"))
    for what, count, bound in (
        ("metadata.labels", _size(metadata.get("labels"), dict), MAX_LABELS),
        ("metadata.annotations", _size(metadata.get("annotations"), dict), MAX_LABELS),
        ("metadata.ownerReferences", _size(metadata.get("ownerReferences"), list), MAX_OWNERS),
    ):
        if count > bound:
            return _over(what, count, bound)
    containers = _list(spec.get("containers")) + _list(spec.get("initContainers"))
    if len(containers) > MAX_CONTAINERS:
        return _over("spec.containers and spec.initContainers", len(containers), MAX_CONTAINERS)
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        if not isinstance(resources, dict):
            continue
        for table in ("requests", "limits"):
            count = _size(resources.get(table), dict)
            if count > MAX_RESOURCES:
                return _over(f"a container's resources.{table}", count, MAX_RESOURCES)
    if _size(spec.get("tolerations"), list) > MAX_TOLERATIONS:
        return _over("spec.tolerations", _size(spec.get("tolerations"), list), MAX_TOLERATIONS)
    if _size(spec.get("nodeSelector"), dict) > MAX_LABELS:
        return _over("spec.nodeSelector", _size(spec.get("nodeSelector"), dict), MAX_LABELS)
    if spec.get("affinity") is None:
        return None
    node = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    required = _list(_dict(node.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    if len(required) > MAX_TERMS:
        return _over("required node selector terms", len(required), MAX_TERMS)
    preferred = _list(node.get("preferredDuringSchedulingIgnoredDuringExecution"))
    if len(preferred) > MAX_TERMS:
        return _over("preferred scheduling terms", len(preferred), MAX_TERMS)
    expressions = [e for _, found in _affinity_expressions(spec) for e in found]
    if len(expressions) > MAX_EXPRESSIONS:
        return _over("node affinity match expressions", len(expressions), MAX_EXPRESSIONS)
    values = sum(len(_list(_dict(e).get("values"))) for e in expressions)
    if values > MAX_VALUES:
        return _over("node affinity values", values, MAX_VALUES)
    return None
