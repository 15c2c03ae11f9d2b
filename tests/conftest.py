"""Shared test helpers: the recorded fixtures, pod builders, policies and a session CA."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from gpupack.certs.issue import KeyPair, issue_ca, issue_serving_cert, write_pair
from gpupack.core.admitted import admitted_pod
from gpupack.core.cluster import ClusterFacts
from gpupack.core.kube import facts_from_lists
from gpupack.core.policy import parse_policy
from gpupack.core.policy_store import LoadedPolicy
from gpupack.testing.apiserver import FakeApiServer
from gpupack.testing.pods import review
from gpupack.webhook.mutate import MutationContext

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "fixtures" / "recorded-k8s-1.36"
ADMISSION = RECORDED / "admission"

W = "gpupack.io/"


def recorded_text(path: Path) -> str:
    """A recorded body with the recording's placeholder label domain replaced by gpupack's names.

    The recording used `gpu.example.com/` (its README: "the project picks its own names") and the annotation
    `model-memory` for what gpupack's contract calls `gpu-memory`.
    """
    text = path.read_text()
    return text.replace("gpu.example.com/model-memory", W + "gpu-memory").replace("gpu.example.com/", W)


def recorded_review(name: str) -> dict[str, Any]:
    """One recorded AdmissionReview by file stem."""
    review: dict[str, Any] = json.loads(recorded_text(ADMISSION / f"{name}.json"))
    return review


def recorded_api_server() -> FakeApiServer:
    """The HTTP-level fake API server holding the recorded cluster's PriorityClasses and nodes."""
    return FakeApiServer(
        json.loads((RECORDED / "priorityclasses.json").read_text())["items"],
        json.loads((RECORDED / "nodes.json").read_text())["items"],
    )


def recorded_facts() -> ClusterFacts:
    """The recorded cluster's PriorityClasses and node allocatable."""
    return facts_from_lists(
        json.loads((RECORDED / "priorityclasses.json").read_text()), json.loads((RECORDED / "nodes.json").read_text())
    )


# What the admin of the recorded cluster would write: its PriorityClasses are named gpu-*.
RECORDED_POLICY = b"""
classes:
  inference: {priorityClassName: gpu-inference-high}
  batch: {priorityClassName: gpu-batch-low}
"""


def loaded(doc: bytes | str = b"", version: str = "test") -> LoadedPolicy:
    """A validated policy from YAML text."""
    raw = doc.encode() if isinstance(doc, str) else doc
    return LoadedPolicy(parse_policy(raw), version)


def context(
    doc: bytes | str = b"", facts: ClusterFacts | None = None, opted_in: bool = False, version: str = "test"
) -> MutationContext:
    """A mutation context with a policy from YAML text."""
    policy = loaded(doc, version)
    return MutationContext(policy.policy, policy.version, facts or ClusterFacts(), opted_in)


def make_pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    namespace: str = "team-a",
    owner: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod as the API server hands it to webhooks (the demo's pod, named `p`), with test overrides."""
    pod = admitted_pod("p", labels, owner=owner, namespace=namespace)
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    pod["spec"]["containers"] = containers or [{"name": "main", "image": "img"}]
    pod["spec"].update(spec)
    return pod


admission_review = review  # the demo's builder is the one wrapper of a pod in an AdmissionReview


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """`gpupack.cli.main` installs a handler on the root logger writing to the stderr of its test (captured, then
    closed); later tests that log would write to the closed stream. Each test gets the root logger back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def ca() -> KeyPair:
    """One CA per test session (issuing is the slow part)."""
    return issue_ca("gpupack-test-ca")


@pytest.fixture
def tls_dir(tmp_path: Path, ca: KeyPair) -> Path:
    """A directory with ca.crt, tls.crt and tls.key for 127.0.0.1 and localhost."""
    write_pair(tmp_path, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
    return tmp_path


async def wait_until(condition: Callable[[], object], timeout: float = 10.0, what: str = "the condition") -> None:
    """Poll `condition` every 10 ms until it is true; fail after `timeout` seconds (a bound, not a measurement:
    background work such as a policy reload in a child process takes a variable time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        await asyncio.sleep(0.01)


def configmap_volume(root: Path, content: bytes, generation: int, name: str = "policy.yaml") -> Path:
    """The kubelet's layout of a ConfigMap volume: `NAME -> ..data/NAME`, and `..data` a symlink swapped
    atomically to the directory of each new generation."""
    data_dir = root / f"..2026_{generation}"
    data_dir.mkdir()
    (data_dir / name).write_bytes(content)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(data_dir.name)
    os.replace(tmp_link, root / "..data")
    user_path = root / name
    if not user_path.is_symlink():
        user_path.symlink_to(f"..data/{name}")
    return user_path


async def served_serial(port: int, ca_file: Path) -> int:
    """Serial number of the certificate a TLS server on loopback presents to a new connection."""
    context = ssl.create_default_context(cafile=str(ca_file))
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


def pytest_sessionstart(session: pytest.Session) -> None:
    """The built upstream tools (`tools/build`: kube-apiserver, kube-scheduler, kubectl, helm) come first on PATH,
    so every test that runs `kubectl` or `helm` runs the pinned version."""
    from gpupack.testing.control_plane import tools

    found = tools()
    os.environ["PATH"] = os.pathsep.join(
        [str(found.kubectl.parent), str(found.helm.parent), os.environ.get("PATH", "")]
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test on a real control plane reports where its processes' logs are and how each ended: the logs
    themselves stay in the test's folder (pytest keeps the last three runs' folders)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    from gpupack.testing.control_plane import ControlPlane

    for value in getattr(item, "funcargs", {}).values():
        planes = [v for v in (value, *(value if isinstance(value, tuple) else ()), getattr(value, "plane", None))]
        for plane in planes:
            if isinstance(plane, ControlPlane):
                tails = "\n".join(
                    f"--- {name} ({plane.workdir / (name + '.log')}):\n" + "\n".join(text.splitlines()[-15:])
                    for name, text in plane.logs().items()
                )
                report.sections.append(("control plane logs", tails))
