"""Requests a real API server or scheduler would never send, but a hand-made or hostile client can: each gets an
answer that names the problem (or a harmless result), never an HTTP 500, an internal-error refusal, a logged
traceback, a blocked event loop or a policy that breaks scoring. Found by fuzzing both services."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.kube import ClusterFactsCache
from gpupack.core.policy import PolicyError, parse_policy
from gpupack.core.policy_store import PolicyStore
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.extender.app import make_app as make_extender
from gpupack.extender.inventory import MAX_NODE_GPUS, node_from_json
from gpupack.webhook.app import make_app as make_webhook
from gpupack.webhook.mutate import AUDIT_ANNOTATION_CHARS, plan
from tests.conftest import W, admission_review, context, loaded, make_pod
from tests.extender_kit import extender_for, node, policy, recorded_args, recorded_nodes, registry

FILTER = "000-filter-llm-infer-7b-abc12.json"
FULL_NODES = "100-filter-embed-shared-1.json"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def webhook(doc: str = "") -> Any:
    return make_webhook(PolicyStore(None, loaded(doc)), ClusterFactsCache(None), CollectorRegistry())


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log lines that carry an exception: the handlers' unexpected-error path."""
    return [r.getMessage() for r in caplog.records if r.exc_info]


# quantities ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["1e999999", "1e1000000", "1e400", "18446744073709551616", "16Ei", 1e308, "1" + "0" * 1000, "1" + "0" * 999 + "Ki"],
)
def test_a_quantity_too_large_for_any_resource_is_refused_at_once(text: str | float) -> None:
    # "1e999999" used to become a million-digit integer downstream: about 10 s of CPU per conversion
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity(text)


def test_a_quantity_finer_than_a_nano_unit_rounds_up_to_it_as_kubernetes_does() -> None:
    assert parse_quantity("1e-1000000") == parse_quantity("1n") == parse_quantity("0.1n")
    assert parse_quantity("123456789.123456789123m") == Decimal("123456.789123457")
    assert parse_quantity("7Ei") == 7 * 2**60 and parse_quantity("500m") * 1000 == 500


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0e1000000", 0),  # zero, whatever the exponent (it overflowed the exponent arithmetic)
        ("0e99999999", 0),
        ("1" + "0" * 42 + "e-41", 10),  # many digits and a small exponent: still exact
        ("1" + "0" * 60 + "e-60", 1),
        ("1" + "0" * 1000 + "e-995", 100_000),
        ("1e0000000000005", 100_000),  # leading zeros in the exponent: still 5
        ("1e-0000000000005", Decimal("0.00001")),
    ],
)
def test_a_quantity_written_with_extreme_digits_or_exponent_keeps_its_value(text: str, value: int | Decimal) -> None:
    assert parse_quantity(text) == value


# the webhook -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", [[], {}, ["CREATE"]])
async def test_an_unhashable_operation_is_a_400_naming_it(aiohttp_client: Any, operation: Any) -> None:
    client = await aiohttp_client(webhook())
    review = admission_review(make_pod({W + "workload": "inference"}))
    review["request"]["operation"] = operation
    response = await client.post("/mutate", data=orjson.dumps(review))
    assert response.status == 400  # it was aiohttp's own 500 page
    assert "request.operation" in (await response.json())["error"]


@pytest.mark.parametrize(
    ("labels", "annotations", "named"),
    [
        ({W + "workload": "training", W + "gpus": "²"}, None, "gpupack.io/gpus"),  # "²".isdigit() is true
        ({W + "workload": "inference", W + "gpu-memory": "1e1000000"}, None, "gpupack.io/gpu-memory"),
        ({W + "workload": "inference"}, {W + "gpu-memory": "1e999999"}, "gpupack.io/gpu-memory"),
        ({W + "workload": "inference", W + "gpu-memory": "0e1000000"}, None, "gpupack.io/gpu-memory"),
    ],
)
async def test_a_bad_label_value_is_a_denial_naming_it_not_an_internal_error(
    aiohttp_client: Any,
    caplog: pytest.LogCaptureFixture,
    labels: dict[str, str],
    annotations: dict[str, str] | None,
    named: str,
) -> None:
    client = await aiohttp_client(webhook())
    review = admission_review(make_pod(labels, annotations))
    answer = (await (await client.post("/mutate", data=orjson.dumps(review))).json())["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 400 and named in answer["status"]["message"]
    assert tracebacks(caplog) == []


async def test_a_limit_too_large_to_compare_is_left_to_the_api_server(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client = await aiohttp_client(webhook())
    containers = [{"name": "m", "resources": {"limits": {"cpu": "1e1000000"}}}]
    review = admission_review(make_pod({W + "workload": "inference"}, None, containers))
    answer = (await (await client.post("/mutate", data=orjson.dumps(review))).json())["response"]
    assert answer["allowed"] is True  # unparsable limits are not ours to fix (the API server validates them)
    assert tracebacks(caplog) == []


@pytest.mark.parametrize(
    ("affinity", "named"),
    [
        ({"nodeAffinity": 5}, "nodeAffinity must be an object"),
        ({"nodeAffinity": []}, "nodeAffinity must be an object"),
        ({"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": 5}}}, f"{REQUIRED}.nodeSelectorTerms must be a list"),
        (
            {
                "nodeAffinity": {
                    REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "values": [[1]]}]}]}
                }
            },
            "matchExpressions[0].values must be a list of strings",
        ),
        (
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": {}}},
            "preferredDuringSchedulingIgnoredDuringExecution must be a list",
        ),
    ],
)
async def test_a_malformed_node_affinity_is_a_400_naming_the_part(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture, affinity: dict[str, Any], named: str
) -> None:
    client = await aiohttp_client(webhook())
    pod = make_pod({W + "workload": "inference"})
    pod["spec"]["affinity"] = affinity
    response = await client.post("/mutate", data=orjson.dumps(admission_review(pod)))
    assert response.status == 400
    error = (await response.json())["error"]
    assert "spec.affinity" in error and named in error
    assert tracebacks(caplog) == []


@pytest.mark.parametrize(("mode", "key"), [("enforce", "changes"), ("audit", "would")])
def test_the_change_summary_in_the_audit_annotations_is_clipped(mode: str, key: str) -> None:
    # 100 containers with 63-character names: the summary names each of them
    containers = [{"name": f"c{i:02d}" + "x" * 60, "image": "img"} for i in range(100)]
    decision = plan(make_pod({W + "workload": "inference"}, None, containers), "ml", context(f"mode: {mode}"))
    assert len(decision.message) > AUDIT_ANNOTATION_CHARS  # what it would have been
    annotation = decision.audit_annotations[key]
    assert len(annotation) == AUDIT_ANNOTATION_CHARS and annotation.endswith("…")


# the extender ----------------------------------------------------------------------------------------------
def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("Pod", "metadata", "labels"), "x", "Pod.metadata.labels"),
        (("Pod", "metadata", "annotations"), [1], "Pod.metadata.labels and .annotations"),
        (("Pod", "metadata", "ownerReferences"), 5, "ownerReferences"),
        (("Pod", "spec", "initContainers"), 5, "spec.initContainers must be a list"),
        (("Pod", "spec", "containers", 0, "resources", "requests", "cpu"), "1e1000000", "requests[cpu]"),
        (("Pod", "spec", "containers", 0, "resources", "requests", "cpu"), "1e400", "too large"),
        (("Pod", "spec", "containers", 0, "resources", "requests", "memory"), "1e999999", "requests[memory]"),
    ],
)
async def test_a_bad_pod_field_gets_an_error_naming_it(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture, path: tuple[Any, ...], value: Any, named: str
) -> None:
    client = await aiohttp_client(make_extender(extender_for(recorded_nodes()), registry()))
    args = recorded_args(FILTER)
    _set(args, path, value)
    response = await client.post("/filter", data=orjson.dumps(args))
    assert response.status == 200
    assert named in (await response.json())["Error"]
    assert tracebacks(caplog) == []


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("metadata", "labels"), "x", "metadata.labels must be an object"),
        (("status",), "x", "status must be an object"),
        (("status", "allocatable"), [1], "status.allocatable must be an object"),
        (("spec",), "x", "spec must be an object"),
        (("spec", "taints"), 5, "spec.taints must be a list"),
        (("metadata", "labels", "nvidia.com/gpu.count"), "50000000", "gpu.count=50000000 is more GPUs than a node"),
    ],
)
async def test_a_full_node_of_the_wrong_shape_gets_an_error_naming_it(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture, path: tuple[str, ...], value: Any, named: str
) -> None:
    client = await aiohttp_client(make_extender(extender_for(recorded_nodes()), registry()))
    args = recorded_args(FULL_NODES)
    _set(args["Nodes"]["items"][0], path, value)
    response = await client.post("/filter", data=orjson.dumps(args))
    assert response.status == 200
    error = (await response.json())["Error"]
    assert "ExtenderArgs.Nodes" in error and named in error
    assert tracebacks(caplog) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("metadata", "labels", "nvidia.com/gpu.count"), None),  # not a count: the label is ignored
        (("metadata", "labels", "nvidia.com/gpu.count"), 1e30),
        (("status", "allocatable", "nvidia.com/gpu.shared"), "1e400"),  # unparsable: the node offers none
        (("status", "allocatable", "cpu"), "1e400"),
    ],
)
async def test_a_full_node_with_a_broken_value_is_answered_without_it(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture, path: tuple[str, ...], value: Any
) -> None:
    client = await aiohttp_client(make_extender(extender_for(recorded_nodes()), registry()))
    args = recorded_args(FULL_NODES)
    _set(args["Nodes"]["items"][0], path, value)
    for verb in ("filter", "prioritize"):
        response = await client.post(f"/{verb}", data=orjson.dumps(args))
        assert response.status == 200
        body = await response.json()
        assert body and (verb == "prioritize" or body["Error"] == "")
    assert tracebacks(caplog) == []


# the policy ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ("classes: {inference: {cpu: '1e1000000'}}", "classes.inference.cpu"),
        ("migProfiles: [{name: 1g.5gb, memory: '1e1000000', computeSlices: 1}]", "migProfiles"),
        ("a: " + "[" * 3000 + "]" * 3000, "nested too deeply"),
        ("extender: {weights: {packing: .inf}}", "extender.weights.packing: Input should be a finite number"),
        ("extender: {assumeSeconds: .nan}", "extender.assumeSeconds: Input should be a finite number"),
        ("timeSlicing: {resourceName: cpu}", "timeSlicing.resourceName: String should match pattern"),
        ("timeSlicing: {resourceName: ''}", "timeSlicing.resourceName: String should match pattern"),
    ],
)
def test_a_policy_that_cannot_work_is_a_policy_error_naming_it(doc: str, named: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc.encode())
    assert named in str(caught.value)


def test_a_reload_refused_for_a_huge_quantity_counts_the_failure_and_keeps_the_old_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("")
    failures: list[str] = []
    store = PolicyStore(path, on_failure=failures.append)
    before = store.current.version
    path.write_text("classes: {inference: {cpu: '1e1000000'}}")
    assert store.reload() is False  # decimal.Overflow escaped it before
    assert failures and "classes.inference.cpu" in failures[0]
    assert store.current.version == before


def test_a_time_sliced_node_without_gpu_count_labels_is_kept_with_its_device_count_capped() -> None:
    # 8 GPUs x 256 replicas and no GFD labels: 2048 devices, which are not 2048 GPUs; the node itself is fine
    record = node_from_json(node("ts", {"nvidia.com/gpu.shared": 2048}), policy())
    assert record.gpu_count == MAX_NODE_GPUS
    with pytest.raises(ValueError, match=r"gpu\.count=2048 is more GPUs than a node has"):
        node_from_json(node("ts", {"nvidia.com/gpu.shared": 2048}, labels={"nvidia.com/gpu.count": "2048"}), policy())
