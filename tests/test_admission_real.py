"""The webhook's registration as a real API server applies it: its failure policies with the webhook down, and its
certificate rotated under load, an expired one kept out, and one that expires in use refused by the API server.

The manifests are applied the README's way (kustomize) and the webhook's pod runs as a process with its mounted
Secret, its ServiceAccount's token and its Service's endpoint (`gpupack.testing.deployed`)."""

from __future__ import annotations

import datetime
import json
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpupack.testing.control_plane import ControlPlane, wait_until
from gpupack.testing.deployed import Deployment

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[1]
NS = "gpupack-system"
TEAM = "team-a"
SERVICE_NAME = "gpupack-webhook.gpupack-system.svc"


@pytest.fixture(scope="module")
def admission(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Deployment, Path]]:
    work = tmp_path_factory.mktemp("admission")
    plane = ControlPlane(work / "plane").start()
    try:
        plane.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"))
        certs = work / "certs"
        done = subprocess.run(
            [sys.executable, "-m", "gpupack", "certs", "--out", str(certs), "--service", "gpupack-webhook",
             "--namespace", NS],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        plane.kubectl("-n", NS, "create", "secret", "tls", "gpupack-webhook-tls", f"--cert={certs / 'tls.crt'}",
                      f"--key={certs / 'tls.key'}")  # fmt: skip
        plane.kubectl("apply", "-k", str(ROOT / "manifests"))
        patch = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": done.stdout.strip()} for i in (0, 1)
        ]
        plane.kubectl("patch", "mutatingwebhookconfiguration", "gpupack", "--type=json", "-p", json.dumps(patch))
        policy = plane.get(f"/api/v1/namespaces/{NS}/configmaps/gpupack-policy")
        policy["data"]["policy.yaml"] = "mode: enforce\nscheduler: {name: null}\n"  # no scheduler in this cluster
        plane.request("PUT", f"/api/v1/namespaces/{NS}/configmaps/gpupack-policy", policy)
        plane.node("h100-1", {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8"})
        plane.namespace(TEAM, {"gpupack.io/enabled": "true"})
        rendered = plane.kubectl("kustomize", str(ROOT / "manifests")).stdout
        deployment = Deployment(plane, [d for d in yaml.safe_load_all(rendered) if d], work / "pods")
        start_webhook(deployment)
        yield plane, deployment, certs
    finally:
        plane.stop()


def start_webhook(deployment: Deployment) -> None:
    deployment.run("gpupack-webhook")
    deployment.endpoints("gpupack-webhook", "gpupack-webhook")
    wait_until(lambda: deployment.pods["gpupack-webhook"].probe("webhook") == 200, 60, "webhook ready")


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TEAM, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/model:1"}]},
    }


TRAINING = {"gpupack.io/workload": "training", "gpupack.io/gpus": "1"}


def create(plane: ControlPlane, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("create", "-f", "-", stdin=json.dumps(body), check=False)


def served_serial(deployment: Deployment) -> int:
    """The serial number of the certificate the webhook presents now."""
    port = deployment.pods["gpupack-webhook"].ports["https"]
    context = ssl._create_unverified_context()
    with context.wrap_socket(__import__("socket").create_connection(("127.0.0.1", port), 5)) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def put_secret(plane: ControlPlane, deployment: Deployment, cert: bytes, key: bytes) -> None:
    """Update the TLS Secret, and the mounted files with it (the kubelet's refresh)."""
    import base64

    secret = plane.get(f"/api/v1/namespaces/{NS}/secrets/gpupack-webhook-tls")
    secret["data"] = {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}
    plane.request("PUT", f"/api/v1/namespaces/{NS}/secrets/gpupack-webhook-tls", secret)
    deployment.sync_volumes()


def serving_cert(certs: Path, not_before: datetime.datetime, not_after: datetime.datetime) -> tuple[bytes, bytes]:
    """A serving certificate for the webhook's Service from the CA `gpupack certs` wrote, valid as given."""
    ca_cert = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((certs / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVICE_NAME)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVICE_NAME)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_labelled_pods_are_mutated_and_opted_in_namespace_pods_too(
    admission: tuple[ControlPlane, Deployment, Path],
) -> None:
    plane, _, _ = admission
    assert create(plane, pod("train-up", TRAINING)).returncode == 0
    assert plane.pod(TEAM, "train-up")["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    gpu = pod("notebook-up")
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert create(plane, gpu).returncode == 0
    assert "gpupack.io/class" in plane.pod(TEAM, "notebook-up")["metadata"].get("annotations", {})


def test_certificate_rotation_under_load_drops_no_admission(admission: tuple[ControlPlane, Deployment, Path]) -> None:
    # Pods are created one after another while the Secret is rotated twice (new serving certificates from the same
    # CA, so the caBundle stays valid); the webhook re-reads the mounted files and every create succeeds.
    plane, deployment, certs = admission
    before = served_serial(deployment)
    results: list[subprocess.CompletedProcess[str]] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            results.append(create(plane, pod(f"load-{i}", TRAINING)))
            i += 1

    worker = threading.Thread(target=load)
    worker.start()
    try:
        serials = [before]
        for _ in range(2):
            time.sleep(3)
            now = datetime.datetime.now(datetime.UTC)
            put_secret(plane, deployment, *serving_cert(certs, now - datetime.timedelta(minutes=5),
                                                        now + datetime.timedelta(days=30)))  # fmt: skip
            serials.append(wait_until(lambda: (s := served_serial(deployment)) != serials[-1] and s, 30, "a reload"))
        time.sleep(3)
    finally:
        stop.set()
        worker.join(60)
    failed = [r.stderr for r in results if r.returncode != 0]
    assert len(results) >= 10 and failed == []
    assert len(set(serials)) == 3


def test_an_expired_certificate_is_kept_out_of_a_running_webhook_and_refused_by_a_restarted_one(
    admission: tuple[ControlPlane, Deployment, Path],
) -> None:
    plane, deployment, certs = admission
    webhook = deployment.pods["gpupack-webhook"].processes["webhook"]
    serving = served_serial(deployment)
    now = datetime.datetime.now(datetime.UTC)
    # An expired certificate in the Secret: the webhook keeps the one it serves, and admissions go on.
    put_secret(
        plane, deployment, *serving_cert(certs, now - datetime.timedelta(days=2), now - datetime.timedelta(days=1))
    )
    wait_until(lambda: "not reloaded, keeping the current one" in webhook.text(), 30, "the refusal in the log")
    assert served_serial(deployment) == serving
    assert create(plane, pod("after-expired-secret", TRAINING)).returncode == 0
    # A pod restarted with the expired Secret (nobody renewed it) refuses to serve it: the process stops naming the
    # expiry, the pod is never ready, and the API server refuses labelled pods (failurePolicy Fail).
    deployment.stop("gpupack-webhook")
    deployment.run("gpupack-webhook")
    restarted = deployment.pods["gpupack-webhook"].processes["webhook"]
    wait_until(lambda: not restarted.running, 30, "the webhook to refuse its certificate")
    assert restarted.popen is not None and restarted.popen.returncode == 2
    assert "expired at" in restarted.text()
    deployment.endpoints("gpupack-webhook", "gpupack-webhook")
    refused = create(plane, pod("after-expiry", TRAINING))
    assert refused.returncode != 0 and 'failed calling webhook "pods.gpupack.io"' in refused.stderr
    assert plane.pod(TEAM, "after-expiry") is None
    # Renewed: the pod starts again and admissions resume.
    now = datetime.datetime.now(datetime.UTC)
    put_secret(
        plane, deployment, *serving_cert(certs, now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=30))
    )
    deployment.stop("gpupack-webhook")
    start_webhook(deployment)
    assert create(plane, pod("renewed", TRAINING)).returncode == 0


def test_with_the_webhook_down_labelled_pods_are_refused_and_opted_in_namespace_pods_admitted_unmutated(
    admission: tuple[ControlPlane, Deployment, Path],
) -> None:
    plane, deployment, _ = admission
    deployment.stop("gpupack-webhook")
    refused = create(plane, pod("train-down", TRAINING))
    # failurePolicy: Fail for pods that opted in: a GPU pod never slips past unmutated
    assert refused.returncode != 0 and 'failed calling webhook "pods.gpupack.io"' in refused.stderr
    assert plane.pod(TEAM, "train-down") is None
    # failurePolicy: Ignore for the other pods of an opted-in namespace: they did not ask
    gpu = pod("notebook-down")
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert create(plane, gpu).returncode == 0
    created = plane.pod(TEAM, "notebook-down")
    assert created is not None and "gpupack.io/class" not in created["metadata"].get("annotations", {})
    start_webhook(deployment)
    assert create(plane, pod("train-back", TRAINING)).returncode == 0
