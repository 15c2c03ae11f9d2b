"""The shipped mig-plan RBAC (manifests/mig-plan/) as kustomize builds it, and whether it allows a request."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.conftest import ROOT

MANIFESTS = ROOT / "manifests" / "mig-plan"
SERVICE_ACCOUNT = ("gpupack-system", "gpupack-mig-plan")


def built() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(MANIFESTS)], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def request_of(method: str, path: str) -> tuple[str, str, str | None, str | None]:
    """(verb, resource, namespace, name) of a core/v1 request as the API server's authorizer sees it."""
    parts = path.strip("/").split("/")[2:]  # after api/v1
    namespace = None
    if parts[0] == "namespaces" and len(parts) > 2:
        namespace, parts = parts[1], parts[2:]
    resource, name = parts[0], (parts[1] if len(parts) > 1 else None)
    verb = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create", "PUT": "update"}[method]
    return verb, resource, namespace, name


def allowed(objects: list[dict[str, Any]], verb: str, resource: str, namespace: str | None, name: str | None) -> bool:
    """RBAC's rule: some role bound to the ServiceAccount has a rule with the verb, the resource (core group) and,
    when the rule lists resourceNames, the name; a Role only in its own namespace."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if "rules" in o}
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        subjects = {(s.get("namespace"), s["name"]) for s in binding["subjects"] if s["kind"] == "ServiceAccount"}
        if SERVICE_ACCOUNT not in subjects:
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles.get((ref["kind"], where if ref["kind"] == "Role" else None, ref["name"]))
        if role is None or (where is not None and where != namespace):
            continue
        for rule in role["rules"]:
            names = rule.get("resourceNames")
            if (
                "" in rule["apiGroups"]
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and (not names or name in names)
            ):
                return True
    return False
