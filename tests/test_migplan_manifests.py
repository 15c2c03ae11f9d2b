"""manifests/mig-plan/: kustomize builds it, every object validates against the Kubernetes schemas, the Job's
arguments are ones the command accepts, and the ConfigMap it checks is the one the example MIG manager reads and
the Role may read."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpupack.cli import build_parser
from tests.conftest import ROOT
from tests.crd_kit import load_documents
from tests.migplan_rbac_kit import built


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return built()


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_object_validates_strictly(objects: list[dict[str, Any]], version: str) -> None:
    assert {o["kind"] for o in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Job",
    }
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_job_runs_the_plan_with_arguments_the_command_accepts(objects: list[dict[str, Any]]) -> None:
    (job,) = [o for o in objects if o["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "mig-plan" and args.in_cluster and not args.apply  # prints; --apply is the admin's step
    assert spec["serviceAccountName"] == "gpupack-mig-plan" and job["metadata"]["namespace"] == "gpupack-system"
    (configmap,) = load_documents(ROOT / "examples" / "gpu-stack" / "mig-parted-config.yaml")
    where = f"{configmap['metadata']['namespace']}/{configmap['metadata']['name']}"
    assert args.mig_config_map == where
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "gpupack-mig-plan-layouts"]
    assert role["metadata"]["namespace"] == configmap["metadata"]["namespace"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [configmap["metadata"]["name"]],
            "verbs": ["get"],
        }
    ]
