"""The policy document: defaults, partial overrides, errors that name the field, and live reload."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpupack.core.policy import PolicyError, parse_policy, policy_version
from gpupack.core.policy_store import PolicyStore, load_policy_file
from gpupack.core.telemetry import PolicyMetrics
from tests.conftest import configmap_volume as _configmap_volume
from tests.conftest import wait_until


def test_empty_document_is_the_guides_policy() -> None:
    policy = parse_policy(b"")
    assert policy.mode == "enforce" and policy.default_class == "inference"
    assert (policy.classes.inference.sharing, policy.classes.inference.spot) == ("mig", "forbid")
    assert (policy.classes.training.sharing, policy.classes.training.spot) == ("exclusive", "prefer")
    assert (policy.classes.batch.sharing, policy.classes.batch.spot) == ("time-slicing", "require")
    assert policy.time_slicing.resource_name == "nvidia.com/gpu.shared"
    assert ("node-type", "spot") in policy.spot.recognised  # the cluster's own, beside Karpenter's and the clouds'
    assert ("karpenter.sh/capacity-type", "spot") == policy.spot.recognised[0]
    assert policy.autoscalers == ["cluster-autoscaler", "karpenter"]
    assert {"kube-system", "gpupack-system"} <= policy.never_touched
    names = {p.name for p in policy.mig_profiles}
    assert {"1g.5gb", "1g.10gb", "3g.40gb", "7g.80gb", "1g.18gb", "7g.141gb"} <= names


def test_a_class_given_partly_keeps_its_other_defaults() -> None:
    policy = parse_policy(b"classes: {inference: {spot: prefer}}")
    assert policy.classes.inference.spot == "prefer"
    assert policy.classes.inference.sharing == "mig" and policy.classes.inference.memory == "4Gi"


def test_priority_classes_given_are_added_to_the_defaults() -> None:
    policy = parse_policy(b"priorityClasses: {mine: {value: 5}}")
    assert policy.priority_classes["mine"].value == 5 and "gpupack-batch" in policy.priority_classes


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (b"classes: {inference: {spot: maybe}}", "classes.inference.spot"),
        (b"classes: {training: {cpu: lots}}", "classes.training.cpu"),
        (b"mode: strict", "mode"),
        (b"modee: audit", "modee: Extra inputs are not permitted"),
        (b"migProfiles: [{name: big, memory: 8Gi, computeSlices: 1}]", "migProfiles.0.name"),
        (b"spot: {preferWeight: 500}", "spot.preferWeight"),
        (
            b"spot: {labels: [{key: node type, value: spot}]}",
            "spot.labels.0.key: Value error, 'node type' is not a label key",
        ),
        (b"spot: {labels: [{key: a/b/c, value: spot}]}", "spot.labels.0.key: Value error, 'a/b/c' is not a label key"),
        (b"spot: {labels: [{key: " + b"x" * 64 + b", value: spot}]}", "spot.labels.0.key"),
        (b"spot: {labels: [{key: node-type, value: spot!}]}", "spot.labels.0.value"),
        (b"spot: {labels: [{key: node-type}]}", "spot.labels.0.value: Field required"),
        (b"spot: {taints: [{key: node-type, value: spot, effect: Sometimes}]}", "spot.taints.0.effect"),
        (b"spot: {label: {key: node-type, value: spot}}", "spot: Value error, label is now labels, a list"),
        (b"spot: {wellKnown: maybe}", "spot.wellKnown"),
        (
            b"autoscalers: [cluster-autoscaler, keda]",
            "autoscalers.1: Input should be 'cluster-autoscaler' or 'karpenter'",
        ),
        (b"autoscalers: karpenter", "autoscalers: Input should be a valid list"),
        (b"gpupackNamespace: Not_A_Name", "gpupackNamespace"),
        (b"- a list", "must be a YAML mapping"),
        (b"a: [", "not valid YAML"),
    ],
)
def test_invalid_documents_name_the_field(doc: bytes, named: str) -> None:
    with pytest.raises(PolicyError, match=named.replace(".", r"\.").replace("[", r"\[")):
        parse_policy(doc, "policy.yaml")


async def test_reload_refuses_an_invalid_version_and_keeps_serving_the_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    metrics = PolicyMetrics(registry)
    path = _configmap_volume(tmp_path, b"classes: {batch: {spot: prefer}}", 1)
    store = PolicyStore(path, on_reload=metrics.loaded, on_failure=metrics.failed)
    first = store.current.version
    watcher = asyncio.create_task(store.watch(0.02))
    try:
        with caplog.at_level(logging.ERROR):
            _configmap_volume(tmp_path, b"classes: {batch: {spot: sometimes}}", 2)
            await wait_until(lambda: registry.get_sample_value("gpupack_policy_reload_failures_total") == 1.0)
        assert store.current.version == first and store.policy.classes.batch.spot == "prefer"
        assert any("classes.batch.spot" in r.getMessage() for r in caplog.records)
        assert registry.get_sample_value("gpupack_policy_reload_failures_total") == 1.0
        assert registry.get_sample_value("gpupack_policy_info", {"version": first, "mode": "enforce"}) == 1.0

        _configmap_volume(tmp_path, b"mode: audit", 3)
        await wait_until(lambda: store.policy.mode == "audit")
        assert store.policy.mode == "audit" and store.current.version == policy_version(b"mode: audit")
        assert registry.get_sample_value("gpupack_policy_info", {"version": first, "mode": "enforce"}) is None
    finally:
        watcher.cancel()


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (b"autoscalers: [karpenter, descheduler]", "autoscalers.1: Input should be"),
        (b"spot: {labels: [{key: 'karpenter.sh/capacity type', value: spot}]}", "spot.labels.0.key"),
    ],
)
async def test_a_reload_naming_an_unknown_autoscaler_or_a_malformed_spot_label_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: bytes, named: str
) -> None:
    good = b"autoscalers: [karpenter]\nspot: {labels: [{key: pool, value: cheap}]}"
    registry = CollectorRegistry()
    metrics = PolicyMetrics(registry)
    path = _configmap_volume(tmp_path, good, 1)
    store = PolicyStore(path, on_reload=metrics.loaded, on_failure=metrics.failed)
    before = store.current.version
    watcher = asyncio.create_task(store.watch(0.02))
    try:
        with caplog.at_level(logging.ERROR):
            _configmap_volume(tmp_path, bad, 2)
            await wait_until(lambda: registry.get_sample_value("gpupack_policy_reload_failures_total") == 1.0)
        assert store.current.version == before
        assert store.policy.autoscalers == ["karpenter"] and ("pool", "cheap") in store.policy.spot.recognised
        assert any(named in r.getMessage() for r in caplog.records)
    finally:
        watcher.cancel()


def test_missing_policy_file_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_policy_file(tmp_path / "absent.yaml")


def test_reload_of_a_vanished_file_keeps_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"mode: audit")
    store = PolicyStore(path)
    path.unlink()
    assert store.reload() is False and store.policy.mode == "audit"
