"""Properties over random pods and label values: the decision never fails unexpectedly, its patch applies,
a second pass changes nothing, and everything outside the mutation is byte-for-byte what came in."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import jsonpatch
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupack.core.quantity import MAX_QUANTITY, QuantityError, parse_quantity
from gpupack.webhook.mutate import InvalidObject, plan
from gpupack.webhook.review import build_response
from tests.conftest import W, context

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.text(max_size=8))
json_value = st.recursive(
    json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6
)
odd_key = st.text(alphabet="ab~/.-_x", min_size=1, max_size=10)

label_values = {
    "workload": st.sampled_from(["inference", "training", "batch", "serving", ""]),
    "gpu-memory": st.sampled_from(["8Gi", "5Gi", "20Gi", "100Gi", "200Gi", "lots", "0", "1.5Gi", "9000Mi"]),
    "gpus": st.sampled_from(["1", "2", "8", "-1", "0", "x"]),
    "latency": st.sampled_from(["critical", "tolerant", "fast"]),
    "sharing": st.sampled_from(["mig", "time-slicing", "exclusive", "mps"]),
    "checkpoint": st.sampled_from(["true", "false", "yes"]),
}
gpu_labels = st.fixed_dictionaries({}, optional={W + k: v for k, v in label_values.items()})
quantity = st.sampled_from(["100m", "1", "2", "4Gi", "512Mi", "16Gi"])
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]), quantity, max_size=3
        ),
        "limits": st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpu.shared"]), quantity, max_size=3
        ),
    },
)
container = st.builds(
    lambda name, res, extra: {"name": name, "image": "img", "resources": res, **extra},
    st.sampled_from(["main", "side", "proxy"]),
    resources,
    st.dictionaries(st.sampled_from(["x-unknown", "args", "env"]), json_value, max_size=2),
)
affinity = st.one_of(
    st.none(),
    st.just(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        }
    ),
    st.just({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}),
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    containers = draw(st.lists(container, min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    annotations = draw(st.dictionaries(odd_key, st.text(max_size=5), max_size=3))
    if draw(st.booleans()):
        annotations[W + "container"] = draw(st.sampled_from(["main", "side", "ghost"]))
    spec: dict[str, Any] = {"containers": containers, "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}
    if (aff := draw(affinity)) is not None:
        spec["affinity"] = aff
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.dictionaries(st.sampled_from(["node-type", "zone"]), st.sampled_from(["spot", "on-demand"]), max_size=2)
        )
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "node-type", "operator": "Exists"}]
    if draw(st.booleans()):
        spec["priorityClassName"] = "custom"
    spec.update(draw(st.dictionaries(st.sampled_from(["x-future-field", "hostname"]), json_value, max_size=1)))
    metadata: dict[str, Any] = {
        "name": "p",
        "namespace": "team",
        "labels": draw(gpu_labels),
        "annotations": annotations,
    }
    if draw(st.booleans()):
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": draw(st.sampled_from(["StatefulSet", "ReplicaSet"])),
                "name": "o",
                "uid": "u",
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "x-extra": draw(json_value)}


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, str(k)))]
    if isinstance(node, list) and node:
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, str(i)))]
    return [(path, node)]


def _tokens(pointer: str) -> tuple[str, ...]:
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:])


def _at(node: Any, path: tuple[str, ...]) -> Any:
    for token in path:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


POLICIES = ["", "mode: audit", "enforce: [gpu, requests, spot, priority, autoscaler]"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), policy=st.sampled_from(POLICIES), opted_in=st.booleans())
def test_decisions_are_total_applicable_idempotent_and_local(pod: dict[str, Any], policy: str, opted_in: bool) -> None:
    original = orjson.dumps(pod)
    ctx = context(policy, opted_in=opted_in)
    try:
        decision = plan(pod, "team", ctx)
    except InvalidObject:
        return  # becomes HTTP 400 with the message; never a 500
    assert orjson.dumps(pod) == original  # the input is not modified
    review = build_response("uid", decision)
    assert review["response"]["allowed"] is decision.allowed
    assert all(len(w) <= 120 for w in decision.warnings)
    if not decision.allowed:
        assert decision.ops == [] and review["response"]["status"]["code"] == 400
        return
    patched = jsonpatch.apply_patch(pod, decision.ops)
    assert plan(patched, "team", ctx).ops == []
    touched = [_tokens(op["path"]) for op in decision.ops]
    for path, value in _leaves(pod):
        if any(path[: len(t)] == t for t in touched):
            continue  # replaced or removed by the patch
        if value in ({}, []) and any(t[: len(path)] == path for t in touched):
            continue  # an empty object or list the patch adds into

        assert orjson.dumps(_at(patched, path)) == orjson.dumps(value), path


quantity_text = st.builds(
    lambda sign, digits, point, decimals, suffix: f"{sign}{digits}{point}{decimals}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.text(alphabet="0123456789", min_size=1, max_size=40),
    st.sampled_from(["", "."]),
    st.text(alphabet="0123456789", max_size=30),
    st.one_of(
        st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
        st.integers(-(10**30), 10**30).map(lambda e: f"e{e}"),
    ),
)


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(quantity_text, st.text(max_size=20)))
def test_a_quantity_parses_to_a_bounded_exact_value_or_a_quantity_error(text: str) -> None:
    """Whatever the digits and exponent, parsing either refuses with QuantityError (which every caller turns into
    a message naming the field) or gives a value within the int64 range, at nano precision, without overflow."""
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert abs(value) <= MAX_QUANTITY
    assert value == 0 or abs(value) >= Decimal("1e-9")
    assert value.as_tuple().exponent >= -9  # type: ignore[operator]
    int(value * 1000)  # what the extender does with it: cheap, whatever the text
