"""The chart on a real control plane, the README's Helm way: `helm install`, the webhook and the gpupack scheduler
run from the release's own manifest (`gpupack.testing.deployed`), labelled pods mutated, routed and packed;
`helm upgrade`
of the policy reaching the running webhook while pods are created, none refused; `helm uninstall` removing the
webhook's registration before its Service, so no pod creation fails while it runs, and leaving nothing of the
release behind. The kustomize way is test_deploy_real.py, whose steps this shares."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from gpupack.testing.control_plane import ControlPlane, iter_documents, wait_until
from gpupack.testing.deployed import Deployment
from tests.audit_log import audited_plane
from tests.chart_kit import CHART
from tests.test_deploy_real import (
    NS,
    gpu_cluster,
    labelled_pod,
    metric,
    no_refusals,
    packed_by_the_extender,
    probes_answer,
    readme_certs,
    run_gpupack,
)

pytestmark = pytest.mark.timeout(600)
LOAD = "load"
"""An opted-in namespace whose pods are created in a loop during an upgrade and an uninstall."""


def helm(plane: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The built helm against this API server as admin, with its own configuration and cache folders."""
    home = plane.workdir / "helm"
    env = {
        "PATH": f"{plane.tools.helm.parent}:/usr/bin:/bin",
        "HOME": str(home),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    argv = [str(plane.tools.helm), f"--kubeconfig={plane.admin_kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def release_objects(plane: ControlPlane) -> list[dict[str, Any]]:
    """What the release installed: its manifest and its hooks."""
    manifest = helm(plane, "get", "manifest", "gpupack", "-n", NS).stdout
    hooks = helm(plane, "get", "hooks", "gpupack", "-n", NS).stdout
    return list(iter_documents(manifest)) + [{**h, "hook": True} for h in iter_documents(hooks)]


def still_there(plane: ControlPlane, objects: list[dict[str, Any]]) -> list[str]:
    """Those of the objects that exist, as `kind/name`."""
    manifests = yaml.safe_dump_all([{k: v for k, v in o.items() if k != "hook"} for o in objects])
    found = plane.kubectl("get", "-f", "-", "-o", "name", "--ignore-not-found", stdin=manifests, check=False)
    return found.stdout.split()


@dataclass
class PodLoop:
    """Creates labelled pods in LOAD, one after the other, until stopped; keeps every refusal. Each pod is bound to
    the CPU node at creation (`nodeName`), so no scheduler works on them and they take no GPU from the tests."""

    plane: ControlPlane
    prefix: str
    pause: float = 0.05
    """Seconds between two creations."""
    created: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> PodLoop:
        self._thread = threading.Thread(target=self._run, name=f"pods-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            pod = labelled_pod(f"{self.prefix}-{i}", {"workload": "inference", "gpu-memory": "4Gi"}, LOAD)
            pod["spec"]["nodeName"] = "cpu-1"
            try:
                made = self.plane.request("POST", f"/api/v1/namespaces/{LOAD}/pods", pod)
                self.created.append((time.monotonic(), made))
            except urllib.error.HTTPError as exc:
                self.refused.append(f"{pod['metadata']['name']}: {exc.code} {exc.read().decode()[:500]}")
            i += 1
            time.sleep(self.pause)

    def wait_for(self, count: int, timeout: float = 60) -> None:
        start = len(self.created)
        wait_until(lambda: len(self.created) - start >= count or self.refused, timeout, f"{count} more pods")


def clear_load(plane: ControlPlane) -> None:
    plane.kubectl("-n", LOAD, "delete", "pods", "--all", "--grace-period=0", "--force", "--wait=false")


def policy_mode(deployment: Deployment) -> str | None:
    """The mode of the policy the running webhook has in force (`gpupack_policy_info{mode}`)."""
    pod = deployment.pods["gpupack-webhook"]
    for mode in ("enforce", "audit"):
        if metric(pod, "webhook", f'gpupack_policy_info{{mode="{mode}"') >= 1:
            return mode
    return None


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Deployment]]:
    work = tmp_path_factory.mktemp("helm")
    plane = audited_plane(work, "Metadata").start()
    try:
        # The README's Deploy section with Helm: the namespace and the certificate first, the Secret in it.
        plane.kubectl("create", "namespace", NS)
        bundle = readme_certs(plane, work)
        helm(plane, "install", "gpupack", str(CHART), "-n", NS, "--create-namespace", "--set",
             f"certificates.webhook.caBundle={bundle}")  # fmt: skip
        deployment = Deployment(plane, [o for o in release_objects(plane) if "hook" not in o], work / "pods")
        gpu_cluster(plane)
        plane.namespace(LOAD, {"gpupack.io/enabled": "true"})
        run_gpupack(plane, deployment)
        yield plane, deployment
    finally:
        plane.stop()


def test_the_release_is_deployed_with_every_object_the_chart_rendered(
    release: tuple[ControlPlane, Deployment],
) -> None:
    plane, deployment = release
    status = yaml.safe_load(helm(plane, "status", "gpupack", "-n", NS, "-o", "yaml").stdout)
    assert status["info"]["status"] == "deployed"
    installed = [o for o in release_objects(plane) if "hook" not in o]
    assert len(installed) >= 20
    found = plane.kubectl("get", "-f", "-", "-o", "name", stdin=yaml.safe_dump_all(installed)).stdout.split()
    assert len(found) == len(installed)
    probes_answer(deployment)


def test_a_policy_upgrade_reaches_the_running_webhook_while_no_pod_is_refused(
    release: tuple[ControlPlane, Deployment],
) -> None:
    """The chart ships `mode: audit`; the rollout's second step is `helm upgrade --set policy.mode=enforce`. The
    ConfigMap changes in place and nothing else does (no pod restarts): the kubelet refreshes the mounted file,
    here every second, and the running webhook reloads it within seconds."""
    plane, deployment = release
    webhook = deployment.pods["gpupack-webhook"].processes["webhook"]
    before = {(o["kind"], o["metadata"]["name"]): o for o in release_objects(plane)}
    assert policy_mode(deployment) == "audit"
    stop = threading.Event()

    def kubelet_refresh() -> None:
        while not stop.wait(1.0):
            deployment.sync_volumes()

    refresher = threading.Thread(target=kubelet_refresh, daemon=True)
    refresher.start()
    try:
        with PodLoop(plane, "upgrade") as loop:
            loop.wait_for(5)
            helm(plane, "upgrade", "gpupack", str(CHART), "-n", NS, "--reuse-values", "--set", "policy.mode=enforce")
            wait_until(lambda: policy_mode(deployment) == "enforce", 60, "the webhook in enforce mode")
            reloaded = time.monotonic()
            loop.wait_for(5)
    finally:
        stop.set()
        refresher.join(10)
    assert loop.refused == []
    after = {(o["kind"], o["metadata"]["name"]): o for o in release_objects(plane)}
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert changed == {("ConfigMap", "gpupack-policy")}  # no rollout: the same webhook process serves on
    assert webhook.running
    first, last = loop.created[0][1], [pod for at, pod in loop.created if at > reloaded]
    assert "gpupack.io/audit" in first["metadata"]["annotations"]  # audit: computed, not applied
    assert "nvidia.com/mig-1g.5gb" not in first["spec"]["containers"][0].get("resources", {}).get("requests", {})
    assert last
    for pod in last:  # enforce: applied
        assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.5gb"] == "1"
        assert "gpupack.io/audit" not in pod["metadata"].get("annotations", {})
    clear_load(plane)


def test_labelled_pods_are_mutated_routed_and_packed_through_the_extender(
    release: tuple[ControlPlane, Deployment],
) -> None:
    """test_deploy_real's first scenario, on the release: the policy is `enforce` since the upgrade above."""
    plane, deployment = release
    assert policy_mode(deployment) == "enforce"
    packed_by_the_extender(plane, deployment, "embed")


def test_helm_upgrade_restores_a_deleted_webhook_registration(release: tuple[ControlPlane, Deployment]) -> None:
    """The runbook's emergency stop is deleting the registration; its way back is `helm upgrade --reuse-values`,
    which creates what the release has and the cluster lacks."""
    plane, _ = release
    plane.kubectl("delete", "mutatingwebhookconfiguration", "gpupack")
    helm(plane, "upgrade", "gpupack", str(CHART), "-n", NS, "--reuse-values")
    restored = plane.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupack")
    assert restored and all(w["clientConfig"].get("caBundle") for w in restored["webhooks"])

    def mutated() -> bool:
        name = f"restored-{time.monotonic_ns()}"
        pod = labelled_pod(name, {"workload": "inference", "gpu-memory": "4Gi"}, LOAD)
        pod["spec"]["nodeName"] = "cpu-1"
        made = plane.request("POST", f"/api/v1/namespaces/{LOAD}/pods", pod)
        return "nvidia.com/mig-1g.5gb" in made["spec"]["containers"][0].get("resources", {}).get("requests", {})

    wait_until(mutated, 30, "pods mutated again")
    clear_load(plane)


def test_uninstall_unregisters_the_webhook_first_and_leaves_nothing_behind(
    release: tuple[ControlPlane, Deployment],
) -> None:
    plane, deployment = release
    # The shipped RBAC covered everything so far. From here on it goes: the processes that stand in for the pods
    # keep running (no kubelet stops them) and are refused, as terminating pods would be.
    no_refusals(plane)
    objects = release_objects(plane)
    kinds = {o["kind"] for o in objects}
    assert {"MutatingWebhookConfiguration", "Service", "Deployment", "ClusterRole", "PriorityClass", "Lease"} <= kinds
    gone: dict[str, float] = {}
    watched = {"webhook configuration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupack",
               "Service": f"/api/v1/namespaces/{NS}/services/gpupack-webhook"}  # fmt: skip
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() and len(gone) < len(watched):
            for what, path in watched.items():
                if what not in gone and plane.get(path) is None:
                    gone[what] = time.monotonic()
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    with PodLoop(plane, "uninstall", pause=0) as loop:  # as fast as they go: Helm's steps take milliseconds
        loop.wait_for(5)
        watcher.start()
        helm(plane, "uninstall", "gpupack", "-n", NS)
        loop.wait_for(5)
        stop.set()
        watcher.join(10)
    # While Helm deleted the Service and the Deployments, no labelled pod was refused: the registration was gone.
    assert loop.refused == []
    assert gone["webhook configuration"] < gone["Service"]
    assert deployment.pods["gpupack-webhook"].processes["webhook"].running  # refused by no one, not by a dead pod
    assert helm(plane, "list", "-n", NS, "-a", "-q").stdout.strip() == ""
    # Every object the release made (its hooks too) is gone, cluster-scoped ones included.
    assert still_there(plane, objects) == []
    # And nothing else of it: no object of any kind carries the release's label, and gpupack-system holds only
    # what the README's steps made by hand (the TLS Secret) and what every namespace has.
    listed = plane.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    labelled = plane.kubectl("get", ",".join(listed), "-A", "-l", "app.kubernetes.io/instance=gpupack", "-o", "name",
                             check=False)  # fmt: skip
    assert labelled.stdout.strip() == "", labelled.stdout
    namespaced = plane.kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout.split()
    remaining = plane.kubectl("-n", NS, "get", ",".join(namespaced), "-o", "name", check=False).stdout.split()
    # Besides kube-scheduler's leader events, the EndpointSlice the test made for the webhook's Service (in a
    # cluster the EndpointSlice controller makes it, owned by the Service, and the garbage collector removes it).
    emulated = "endpointslice.discovery.k8s.io/gpupack-webhook-test"
    remaining = [name for name in remaining if not name.startswith("event") and name != emulated]
    assert remaining == ["secret/gpupack-webhook-tls"]  # Helm leaves the namespace: the README deletes both
    clear_load(plane)
