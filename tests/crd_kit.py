"""Validating custom resources against the vendored CRDs of tests/fixtures/crds/ (see its README).

A CRD's `spec.versions[].schema.openAPIV3Schema` is OpenAPI v3.0, close to JSON Schema draft 4. The conversion
keeps what the API server enforces and jsonschema can check: an object with `properties` gets
`additionalProperties: false` (kubectl 1.27 and newer apply with `--validate=strict`, so the server refuses
unknown fields), `x-kubernetes-int-or-string` becomes "integer or string", `x-kubernetes-list-type: set` becomes
`uniqueItems`, `nullable` admits null. CEL rules (`x-kubernetes-validations`) are not evaluated, nor `format`.
The object's `metadata` is checked as an ObjectMeta by kubernetes-validate.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.conftest import ROOT

CRDS = ROOT / "tests" / "fixtures" / "crds"
CRD_FILES = (
    "monitoring.coreos.com_prometheusrules.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeoverlays.yaml",
)


def _json_schema(node: Any) -> Any:
    """The JSON Schema draft 4 equivalent of one OpenAPI v3 schema node, recursively."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _json_schema(value) for key, value in node.items() if not key.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string") and "type" not in node and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("nullable"):
        out.pop("nullable")
        if "type" in out:
            out["type"] = [out["type"], "null"]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """The vendored CRDs by (group, kind)."""
    found = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((CRDS / name).read_text())
        found[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return found


def is_custom(obj: dict[str, Any]) -> bool:
    """Whether the object is of a kind one of the vendored CRDs defines."""
    group = obj["apiVersion"].rpartition("/")[0]
    return (group, obj["kind"]) in crds()


def schema_of(api_version: str, kind: str) -> Any:
    """The JSON Schema of a custom resource from its CRD: KeyError for a kind none defines, ValueError for a
    version its CRD does not serve."""
    group, _, version = api_version.rpartition("/")
    crd = crds()[(group, kind)]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")]
    return _json_schema(copy.deepcopy(served["schema"]["openAPIV3Schema"]))


def custom_errors(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """What the vendored CRD's schema finds wrong with a custom resource; [] when it validates."""
    schema = schema_of(obj["apiVersion"], obj["kind"])
    validator = jsonschema.Draft4Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
    # A CRD's schema says only `metadata: {type: object}`; the API server checks it as an ObjectMeta.
    wrapper = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    try:
        kubernetes_validate.validate(wrapper, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        errors.append(f"metadata: {error.message}")
    if not obj.get("metadata", {}).get("name"):
        errors.append("metadata.name: required")
    return errors


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
