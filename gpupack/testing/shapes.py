"""The largest AdmissionReviews of each shape a hostile client can send within the webhook's body limit: one list or
map of a pod grown until the review fills 3 MiB. Shared by the bounds tests and the hostile-client benchmark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gpupack.core.admitted import admitted_pod
from gpupack.testing.pods import review
from gpupack.webhook.app import MAX_BODY_BYTES

Fill = Callable[[dict[str, Any], int], None]


def _containers(pod: dict[str, Any], n: int) -> None:
    pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(n)]


def _init(pod: dict[str, Any], n: int) -> None:
    pod["spec"]["initContainers"] = [{"name": f"i{i}", "restartPolicy": "Always"} for i in range(n)]


def _tolerations(pod: dict[str, Any], n: int) -> None:
    pod["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(n)]


def _required(pod: dict[str, Any], terms: list[dict[str, Any]]) -> None:
    required = {"nodeSelectorTerms": terms}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def _terms(pod: dict[str, Any], n: int) -> None:
    _required(pod, [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}] * n)


def _expressions(pod: dict[str, Any], n: int) -> None:
    _required(pod, [{"matchExpressions": [{"key": f"k{i}", "operator": "Exists"} for i in range(n)]}])


def _values(pod: dict[str, Any], n: int) -> None:
    _required(
        pod, [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": [f"z{i}" for i in range(n)]}]}]
    )


def _owners(pod: dict[str, Any], n: int) -> None:
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}] * n


def _resources(pod: dict[str, Any], n: int) -> None:
    pod["spec"]["containers"][0]["resources"] = {"requests": {f"example.com/r{i}": "1" for i in range(n)}}


def _labels(pod: dict[str, Any], n: int) -> None:
    pod["metadata"]["labels"].update({f"l{i}": "v" for i in range(n)})


def _annotations(pod: dict[str, Any], n: int) -> None:
    pod["metadata"]["annotations"] = {f"a{i}": "v" for i in range(n)}


def _node_selector(pod: dict[str, Any], n: int) -> None:
    pod["spec"]["nodeSelector"] = {f"s{i}": "v" for i in range(n)}


def _env(pod: dict[str, Any], n: int) -> None:
    """128 containers with `n` environment variables each: within every bound of the pod and of the value count,
    so the webhook decodes and plans it (the most it ever decodes)."""
    env = [{"name": f"E{i}", "value": "x" * 80} for i in range(n)]
    pod["spec"]["containers"] = [{"name": f"c{i}", "image": "i", "env": env} for i in range(128)]


def _label_value(pod: dict[str, Any], n: int) -> None:
    pod["metadata"]["labels"]["gpupack.io/gpu-memory"] = "9" * n + "x"


SHAPES: dict[str, tuple[Fill, str]] = {
    "containers": (_containers, "spec.containers and spec.initContainers"),
    "init": (_init, "spec.containers and spec.initContainers"),
    "tolerations": (_tolerations, "spec.tolerations"),
    "terms": (_terms, "required node selector terms"),
    "expressions": (_expressions, "node affinity match expressions"),
    "values": (_values, "node affinity values"),
    "owners": (_owners, "metadata.ownerReferences"),
    "resources": (_resources, "resources.requests"),
    "labels": (_labels, "metadata.labels"),
    "annotations": (_annotations, "metadata.annotations"),
    "node-selector": (_node_selector, "spec.nodeSelector"),
}
"""Each shape's builder and the part the webhook's refusal names."""

ALL_SHAPES: dict[str, Fill] = {
    **{name: fill for name, (fill, _) in SHAPES.items()},
    "label-value": _label_value,
    "env (planned)": _env,
}


def largest(fill: Fill, labels: dict[str, str], limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The review with the most entries of one kind that still fits in `limit` bytes."""

    def build(n: int) -> dict[str, Any]:
        pod = admitted_pod("p", dict(labels), namespace="team-a")
        fill(pod, n)
        return review(pod)

    low, high = 1, 2
    while len(orjson.dumps(build(high))) <= limit:  # double until too large, then halve the interval
        low, high = high, high * 2
    while low < high:
        middle = (low + high + 1) // 2
        if len(orjson.dumps(build(middle))) <= limit:
            low = middle
        else:
            high = middle - 1
    return build(low)
