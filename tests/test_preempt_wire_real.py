"""The preempt verb's wire format as a real kube-scheduler writes it: a recording extender captures the
ExtenderPreemptionArgs kube-scheduler v1.36 sends (both forms: `nodeCacheCapable` true sends victims by uid,
false sends the victim pods), and the gpupack extender's parser and route are checked on the captured bodies,
then on malformed and oversized versions of them."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
import yaml

from gpupack.extender.app import ExtenderSettings, make_app
from gpupack.extender.wire import ArgsError, parse_preemption_args
from gpupack.testing.control_plane import ControlPlane, Kubelet, wait_until
from tests.extender_kit import extender_for, registry

pytestmark = pytest.mark.timeout(600)
GPU = "nvidia.com/gpu"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}


class Recorder:
    """An extender that passes every node, scores nothing, keeps kube-scheduler's candidates, and records what it
    was sent, per verb."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                verb = self.path.rsplit("/", 1)[-1]
                outer.bodies.setdefault(verb, []).append(raw)
                body = json.loads(raw)
                if verb == "filter":
                    answer: Any = {"NodeNames": body.get("NodeNames"), "Nodes": body.get("Nodes"), "FailedNodes": {},
                                   "FailedAndUnresolvableNodes": {}, "Error": ""}  # fmt: skip
                elif verb == "prioritize":
                    answer = []
                else:
                    meta = body.get("NodeNameToMetaVictims")
                    if meta is None:
                        meta = {
                            node: {"Pods": [{"UID": p["metadata"]["uid"]} for p in v["Pods"]],
                                   "NumPDBViolations": v.get("NumPDBViolations", 0)}
                            for node, v in (body.get("NodeNameToVictims") or {}).items()
                        }  # fmt: skip
                    answer = {"NodeNameToMetaVictims": meta}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def pod(name: str, priority_class: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": priority_class,
        "containers": [{"name": "m", "image": "i", "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "wire"}, "spec": spec}


@pytest.fixture(scope="module", params=[True, False], ids=["node-cache-capable", "full-nodes"])
def captured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[bytes, list[dict[str, Any]]]]:
    """One ExtenderPreemptionArgs body from kube-scheduler, and the pods it names."""
    work = tmp_path_factory.mktemp("wire")
    plane = ControlPlane(work / "plane").start()
    recorder = Recorder()
    try:
        classes = (("low", 10), ("high", 1000))
        plane.apply(
            [
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
                for n, v in classes
            ]
        )
        plane.namespace("wire")
        for name in ("n1", "n2"):
            plane.node(name, {"cpu": "8", "memory": "64Gi", GPU: "2"}, H100)
        victims = []
        for i, node in enumerate(("n1", "n1", "n2", "n2")):
            plane.apply([pod(f"low-{i}", "low", node)])
            status = {"status": {"phase": "Running", "startTime": f"2026-12-01T10:0{i}:00Z"}}
            plane.request("PATCH", f"/api/v1/namespaces/wire/pods/low-{i}/status", status,
                          "application/strategic-merge-patch+json")  # fmt: skip
            victims.append(plane.pod("wire", f"low-{i}"))
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(plane.admin_kubeconfig)},
            "extenders": [{"urlPrefix": recorder.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
                           "preemptVerb": "preempt", "weight": 1, "nodeCacheCapable": request.param,
                           "managedResources": [{"name": GPU}]}],
        }  # fmt: skip
        path = work / "scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        plane.spawn("kube-scheduler", [str(plane.tools.kube_scheduler), f"--config={path}", "--secure-port=0"])
        with Kubelet(plane):
            plane.apply([pod("high", "high")])
            wait_until(lambda: recorder.bodies.get("preempt"), 60, "kube-scheduler's preempt call")
        yield recorder.bodies["preempt"][0], victims
    finally:
        plane.stop()
        recorder.server.shutdown()
        recorder.server.server_close()


def test_the_captured_body_parses_to_the_victims_kube_scheduler_chose(
    captured: tuple[bytes, list[dict[str, Any]]],
) -> None:
    body, victims = captured
    args = parse_preemption_args(body)
    assert args.pod["metadata"]["name"] == "high"
    uids = {v["metadata"]["uid"]: v["spec"]["nodeName"] for v in victims}
    assert set(args.victims) <= {"n1", "n2"} and args.victims
    for node, (chosen, violations) in args.victims.items():
        assert chosen and all(uids[uid] == node for uid in chosen) and violations == 0


async def test_the_route_answers_the_captured_body_in_the_form_kube_scheduler_reads(
    aiohttp_client: Any, captured: tuple[bytes, list[dict[str, Any]]]
) -> None:
    body, victims = captured
    allocatable = {"cpu": "8", "memory": "64Gi", GPU: "2"}
    nodes = [{"metadata": {"name": n, "labels": H100}, "status": {"allocatable": allocatable}} for n in ("n1", "n2")]
    client = await aiohttp_client(make_app(extender_for(nodes, victims), registry()))
    answer = await client.post("/preempt", data=body)
    assert answer.status == 200
    result = await answer.json()
    assert set(result) == {"NodeNameToMetaVictims"}
    kept = result["NodeNameToMetaVictims"]
    assert kept and all(set(v) == {"Pods", "NumPDBViolations"} and v["Pods"] for v in kept.values())
    assert all(set(p) == {"UID"} for v in kept.values() for p in v["Pods"])


@pytest.mark.parametrize("cut", [1, 2, 10])
def test_a_truncated_capture_is_refused_naming_the_problem(
    captured: tuple[bytes, list[dict[str, Any]]], cut: int
) -> None:
    with pytest.raises(ArgsError, match="not JSON"):
        parse_preemption_args(captured[0][:-cut])


async def test_an_oversized_capture_gets_400_and_the_extender_keeps_serving(
    aiohttp_client: Any, captured: tuple[bytes, list[dict[str, Any]]]
) -> None:
    body = orjson.loads(captured[0])
    field = "NodeNameToMetaVictims" if body.get("NodeNameToMetaVictims") is not None else "NodeNameToVictims"
    template = next(iter(body[field].values()))
    body[field] = {f"node-{i}": template for i in range(50)}
    extender = dataclasses.replace(extender_for([]), settings=ExtenderSettings(max_candidates=10))
    client = await aiohttp_client(make_app(extender, registry()))
    answer = await client.post("/preempt", data=orjson.dumps(body))
    assert answer.status == 400 and "50 nodes, more than the 10" in await answer.text()
    assert (await client.get("/healthz")).status == 200


def test_the_captures_keys_are_the_go_field_names(captured: tuple[bytes, list[dict[str, Any]]]) -> None:
    body = orjson.loads(captured[0])
    assert {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"} >= set(body) >= {"Pod"}
    field = body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims")
    assert all({"Pods", "NumPDBViolations"} >= set(v) for v in field.values())
