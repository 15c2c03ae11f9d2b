"""JSON Pointer escaping and the patch builder, checked against a full RFC 6902 implementation."""

from __future__ import annotations

import jsonpatch
import pytest

from gpupack.webhook.patches import PatchBuilder, apply_patch, escape, pointer


@pytest.mark.parametrize(
    ("token", "escaped"),
    [("a/b", "a~1b"), ("a~b", "a~0b"), ("~/", "~0~1"), ("x~1", "x~01"), (3, "3"), ("", "")],
)
def test_tokens_are_escaped_per_rfc_6901(token: str | int, escaped: str) -> None:
    assert escape(token) == escaped


def test_pointer_of_an_annotation_key() -> None:
    assert pointer(("metadata", "annotations", "a.io/b~c")) == "/metadata/annotations/a.io~1b~0c"


def test_builder_creates_missing_parents_once_and_composes_intents() -> None:
    doc = {"spec": {"containers": [{"name": "a"}]}, "metadata": {"annotations": {"k~/x": "1"}}}
    builder = PatchBuilder(doc)
    builder.set_many(("spec", "containers", 0, "resources", "requests"), {"cpu": "1"})
    builder.set(("spec", "containers", 0, "resources", "requests"), "memory", "1Gi")
    builder.append(("spec", "affinity", "nodeAffinity", "preferred"), {"w": 1})
    builder.set(("spec", "affinity", "nodeAffinity"), "required", {"t": []})
    builder.set(("metadata", "annotations"), "k~/x", "2")
    builder.remove(("metadata", "annotations"), "absent")
    ops = builder.ops()
    assert ops[0] == {"op": "add", "path": "/spec/containers/0/resources", "value": {"requests": {"cpu": "1"}}}
    assert {"op": "replace", "path": "/metadata/annotations/k~0~1x", "value": "2"} in ops
    expected = jsonpatch.apply_patch(doc, ops)
    assert apply_patch(doc, ops) == expected
    assert expected["spec"]["affinity"] == {"nodeAffinity": {"preferred": [{"w": 1}], "required": {"t": []}}}
    assert doc == {"spec": {"containers": [{"name": "a"}]}, "metadata": {"annotations": {"k~/x": "1"}}}


def test_builder_emits_nothing_when_every_intent_already_holds() -> None:
    doc = {"spec": {"nodeSelector": {"a": "b"}, "tolerations": [{"key": "k"}]}}
    builder = PatchBuilder(doc)
    builder.set(("spec", "nodeSelector"), "a", "b")
    builder.append(("spec", "tolerations"), {"key": "k"})
    builder.remove(("spec", "nodeSelector"), "zzz")
    assert builder.ops() == []


def test_apply_patch_matches_jsonpatch_for_removals_and_appends() -> None:
    doc = {"a": {"b/c": 1, "d": [1]}}
    ops = [
        {"op": "remove", "path": "/a/b~1c"},
        {"op": "add", "path": "/a/d/-", "value": 2},
        {"op": "replace", "path": "/a/d/0", "value": 0},
    ]
    assert apply_patch(doc, ops) == jsonpatch.apply_patch(doc, ops) == {"a": {"d": [0, 2]}}  # type: ignore[arg-type]
