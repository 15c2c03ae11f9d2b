"""The chart's main-scheduler mode on a real control plane: no second scheduler, the extender alone behind TLS with
client certificates, and the cluster's own kube-scheduler calling it with the `extenders` entry the release prints
(NOTES.txt) and ships (ConfigMap gpupack-scheduler-extender), as an admin would add it to the main scheduler."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpupack.testing.control_plane import ControlPlane, scheduler_config, wait_until
from gpupack.testing.deployed import Deployment
from tests.audit_log import audited_plane
from tests.chart_kit import CHART
from tests.test_deploy_real import (
    NS,
    default_scheduler,
    gpu_cluster,
    gpupack,
    no_refusals,
    packed_by_the_extender,
    probes_answer,
    readme_certs,
)
from tests.test_helm_real import helm, release_objects, still_there

pytestmark = pytest.mark.timeout(600)
PODS = (("gpupack-webhook", "webhook"), ("gpupack-extender", "extender"))


def extender_certs(plane: ControlPlane, work: Path) -> Path:
    """The README's main-mode certificate step: a serving certificate for the extender's Service (and, here, the
    loopback address the test's scheduler calls), a client certificate for the main scheduler from the same CA,
    and the Secret the extender mounts (tls.crt, tls.key, ca.crt)."""
    certs = work / "extender-certs"
    gpupack("certs", "--out", str(certs), "--service", "gpupack-extender", "--namespace", NS, "--ip", "127.0.0.1",
            "--client", "gpupack-scheduler", cwd=work)  # fmt: skip
    files = [f"--from-file={name}={certs / name}" for name in ("tls.crt", "tls.key", "ca.crt")]
    plane.kubectl("-n", NS, "create", "secret", "generic", "gpupack-extender-tls", *files)
    return certs


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Deployment, Path]]:
    work = tmp_path_factory.mktemp("helm-main")
    plane = audited_plane(work, "Metadata").start()
    try:
        plane.kubectl("create", "namespace", NS)
        bundle = readme_certs(plane, work)
        certs = extender_certs(plane, work)
        helm(plane, "install", "gpupack", str(CHART), "-n", NS, "--set", "scheduler.mode=main",
             "--set", "policy.mode=enforce", "--set", f"certificates.webhook.caBundle={bundle}")  # fmt: skip
        deployment = Deployment(plane, [o for o in release_objects(plane) if "hook" not in o], work / "pods")
        gpu_cluster(plane)
        deployment.run("gpupack-webhook")
        deployment.endpoints("gpupack-webhook", "gpupack-webhook")
        extender = deployment.run("gpupack-extender")
        # The admin's step: the shipped `extenders` entry in the main scheduler's configuration, with the client
        # certificate where it says (here: the certs folder; the Service's address: the extender's port here).
        shipped = plane.get(f"/api/v1/namespaces/{NS}/configmaps/gpupack-scheduler-extender")
        (entry,) = yaml.safe_load(shipped["data"]["extenders.yaml"])["extenders"]
        directory = entry["tlsConfig"]["caFile"].rpartition("/")[0]
        entry["tlsConfig"] = {k: v.replace(directory, str(certs)) for k, v in entry["tlsConfig"].items()}
        base = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False}, "extenders": [entry]}  # fmt: skip
        config = scheduler_config(base, plane.client_kubeconfig("system:kube-scheduler"))
        config["extenders"][0]["urlPrefix"] = f"https://127.0.0.1:{extender.ports['https']}"
        path = work / "main-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        default_scheduler(plane, path)
        wait_until(lambda: deployment.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")
        wait_until(lambda: extender.probe("extender") == 200, 60, "extender ready")
        yield plane, deployment, certs
    finally:
        plane.stop()


def test_no_second_scheduler_and_every_probe_answers(release: tuple[ControlPlane, Deployment, Path]) -> None:
    plane, deployment, _ = release
    installed = {(o["kind"], o["metadata"]["name"]) for o in release_objects(plane)}
    assert ("Deployment", "gpupack-extender") in installed and ("Deployment", "gpupack-scheduler") not in installed
    probes_answer(deployment, PODS)


def test_the_notes_print_the_extenders_entry_the_configmap_ships(
    release: tuple[ControlPlane, Deployment, Path],
) -> None:
    plane, _, _ = release
    notes = helm(plane, "get", "notes", "gpupack", "-n", NS).stdout
    printed = yaml.safe_load(notes[notes.index("\nextenders:\n") :])
    shipped = plane.get(f"/api/v1/namespaces/{NS}/configmaps/gpupack-scheduler-extender")
    assert printed == yaml.safe_load(shipped["data"]["extenders.yaml"])


def test_the_main_scheduler_packs_labelled_pods_through_the_extender(
    release: tuple[ControlPlane, Deployment, Path],
) -> None:
    """The webhook routes nothing (`scheduler.name: null`): the pods stay on default-scheduler, which calls the
    extender over TLS with its client certificate."""
    plane, deployment, _ = release
    packed_by_the_extender(plane, deployment, "embed", scheduler_name="default-scheduler")
    no_refusals(plane)


def test_the_extender_refuses_a_caller_without_a_client_certificate(
    release: tuple[ControlPlane, Deployment, Path],
) -> None:
    _, deployment, certs = release
    port = deployment.pods["gpupack-extender"].ports["https"]
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=10).read()
    context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=10) as answer:
        assert answer.status == 200


def test_uninstall_leaves_no_object_of_the_release(release: tuple[ControlPlane, Deployment, Path]) -> None:
    plane, _, _ = release
    objects = release_objects(plane)
    helm(plane, "uninstall", "gpupack", "-n", NS)
    assert still_there(plane, objects) == []
