"""The embedded demo behind `make run`: a real webhook on localhost over TLS, fed a handful of demo pods.

No cluster is needed: the webhook runs with the built-in policy and no API access, so priority values come
from the policy. Each pod goes through HTTPS as an AdmissionReview, exactly as the API server would send it.
"""

from __future__ import annotations

import base64
import ssl
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client import CollectorRegistry

from certs.issue import issue_ca, issue_serving_cert, write_pair
from gpupack.server import ServeOptions, start_server, stop_server
from webhook.patches import PatchOp, apply_patch
from webhook.service import WebhookConfig, build_app


def demo_pod(
    name: str,
    labels: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    owner: str | None = None,
    namespace: str = "ml-serving",
) -> dict[str, Any]:
    """A pod as the API server hands it to webhooks: Priority plugin defaults and default tolerations set."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": name.rsplit("-", 1)[0],
                "uid": str(uuid.uuid4()),
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "main", "image": "registry.example/app:1", "resources": resources or {}}],
            "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
    }


W = "gpupack.io/"
DEMO_PODS: list[tuple[str, str, dict[str, Any]]] = [
    ("inference, 8Gi model", "/mutate", demo_pod("llm-7b", {W + "workload": "inference", W + "gpu-memory": "8Gi"})),
    ("inference, no gpu-memory label", "/mutate", demo_pod("llm-default", {W + "workload": "inference"})),
    (
        "inference, 100Gi model (larger than every MIG profile)",
        "/mutate",
        demo_pod("llm-405b", {W + "workload": "inference", W + "gpu-memory": "200Gi"}),
    ),
    (
        "inference, latency tolerant",
        "/mutate",
        demo_pod("embedder", {W + "workload": "inference", W + "latency": "tolerant"}),
    ),
    (
        "training, 4 GPUs",
        "/mutate",
        demo_pod("ddp-worker-0", {W + "workload": "training", W + "gpus": "4"}, namespace="ml-training"),
    ),
    (
        "training that checkpoints",
        "/mutate",
        demo_pod("finetune-0", {W + "workload": "training", W + "checkpoint": "true"}, namespace="ml-training"),
    ),
    ("batch", "/mutate", demo_pod("bert-batch-x1", {W + "workload": "batch"}, namespace="ml-training")),
    (
        "StatefulSet inference pod",
        "/mutate",
        demo_pod("vector-db-0", {W + "workload": "inference", W + "gpu-memory": "20Gi"}, owner="StatefulSet"),
    ),
    (
        "GPU pod in an opted-in namespace, no label",
        "/mutate/opted-in-namespace",
        demo_pod("notebook", resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}),
    ),
    (
        "invalid label gpu-memory=lots",
        "/mutate",
        demo_pod("typo", {W + "workload": "inference", W + "gpu-memory": "lots"}),
    ),
    ("pod that did not opt in", "/mutate", demo_pod("web", {"app": "web"})),
]


def ensure_certs(directory: Path) -> tuple[Path, Path, Path]:
    """Issue a CA and a localhost certificate on first run; reuse them afterwards."""
    cert, key, ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    if not (cert.exists() and key.exists() and ca.exists()):
        authority = issue_ca("gpupack-demo-ca")
        write_pair(directory, authority, issue_serving_cert(authority, ["localhost"], ["127.0.0.1"]))
    return cert, key, ca


def review(pod: dict[str, Any], dry_run: bool = False, uid: str | None = None) -> dict[str, Any]:
    """Wrap a pod in an AdmissionReview request, as the API server sends it for a CREATE."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name"),
            "namespace": pod["metadata"].get("namespace"),
            "operation": "CREATE",
            "object": pod,
            "dryRun": dry_run,
        },
    }


def describe(title: str, pod: dict[str, Any], response: dict[str, Any]) -> list[str]:
    """What changed and why, for one pod."""
    lines = [f"== {title}: {pod['metadata']['namespace']}/{pod['metadata']['name']}"]
    if not response["allowed"]:
        lines.append(f"   DENIED (HTTP {response['status']['code']} in status): {response['status']['message']}")
        return lines
    ops: list[PatchOp] = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    if not ops:
        lines.append("   admitted untouched")
        return lines
    after = apply_patch(pod, ops)
    container = after["spec"]["containers"][0]
    lines.append(f"   resources: {orjson.dumps(container.get('resources', {})).decode()}")
    lines.append(
        f"   priority: {after['spec'].get('priorityClassName', '-')} = {after['spec'].get('priority')}"
        f" ({after['spec'].get('preemptionPolicy')})"
    )
    for warning in response.get("warnings", []):
        lines.append(f"   - {warning}")
    lines.append(f"   patch: {len(ops)} operations")
    return lines


async def run_demo(workdir: Path) -> int:
    """Start the webhook, send every demo pod through it, print the outcome. Returns the exit code."""
    cert, key, ca = ensure_certs(workdir / "certs")
    app = build_app(WebhookConfig(None, ServeOptions()), CollectorRegistry())
    runner, site, tasks = await start_server(app, ServeOptions("127.0.0.1", 0, cert, key))
    url = f"https://127.0.0.1:{site.bound_port()}"
    print(f"gpupack webhook (built-in policy) listening on {url}; CA {ca}\n")
    client_tls = ssl.create_default_context(cafile=str(ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as session:
            for title, path, pod in DEMO_PODS:
                async with session.post(
                    f"{url}{path}?timeout=5s",
                    data=orjson.dumps(review(pod)),
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    body = await resp.json()
                print("\n".join(describe(title, pod, body["response"])) + "\n")
            async with session.get(f"{url}/metrics") as resp:
                metrics = await resp.text()
        admitted = [line for line in metrics.splitlines() if line.startswith("gpupack_webhook_admissions_total{")]
        print("metrics (gpupack_webhook_admissions_total):\n   " + "\n   ".join(admitted))
    finally:
        await stop_server(runner, tasks)
    return 0
