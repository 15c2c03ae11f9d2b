"""A fake kube-apiserver at the HTTP level holding Nodes and Pods, with a simulated NVIDIA MIG manager, for
`mig-plan --apply` through the real kubernetes client, and the node and pod builders the pure tests use.

It stays for the API server's faults a real one cannot be made to answer on demand: a 500 on a patch or on reads,
and a 409 conflict (per node, a `Mode`). The MIG manager acts as `reconfigure-mig.sh` does: when a node's
`nvidia.com/mig.config` changes it sets `nvidia.com/mig.config.state=pending`, then `success`, and the device plugin
advertises the layout's instances in `status.allocatable`. Everything else, with a MIG manager that fails, hangs
or creates no instances, runs on the real control plane (`tests/mig_manager_real.py`).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from gpupack.testing.apiserver import status_body, write_kubeconfig

__all__ = ["Call", "FakeMigCluster", "Mode", "gpu_pod", "mig_node", "write_kubeconfig"]

CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"

Mode = Literal[
    "ok",
    "patch-500",
    "conflict-once",  # the first PATCH answers 409
]


@dataclass
class Call:
    """One request received, in order."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any = None
    state: str | None = None
    """For a GET of a node: the MIG state label it answered with."""

    @property
    def node(self) -> str | None:
        parts = self.path.split("/")
        return parts[4] if len(parts) > 4 and parts[3] == "nodes" else None


def mig_node(
    name: str,
    config: str | None = "all-disabled",
    state: str | None = "success",
    allocatable: dict[str, int] | None = None,
    unschedulable: bool = False,
    capable: bool = True,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API server returns it, labelled as GFD and the MIG manager leave it."""
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    if capable:
        labels["nvidia.com/mig.capable"] = "true"
    if config is not None:
        labels[CONFIG] = config
    if state is not None:
        labels[STATE] = state
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": labels, "annotations": annotations or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", **{k: str(v) for k, v in (allocatable or {}).items()}}
        },
    }
    return node


def gpu_pod(
    name: str,
    node: str,
    resource: str | None = "nvidia.com/mig-1g.5gb",
    phase: str = "Running",
    init: bool = False,
    namespace: str = "ml",
) -> dict[str, Any]:
    """A pod bound to `node`, asking for one `resource` (None: a CPU-only pod) in a container or init container."""
    container: dict[str, Any] = {"name": "c", "image": "x", "resources": {}}
    if resource is not None:
        container["resources"] = {"limits": {resource: "1"}}
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "main", "image": "x"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"] = [container]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": spec,
        "status": {"phase": phase},
    }


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, `null` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def status(code: int, reason: str, message: str, name: str = "", kind: str = "nodes") -> web.Response:
    return web.json_response(status_body(code, reason, message, name, group="", kind=kind), status=code)


@dataclass
class FakeMigCluster:
    """Nodes, pods and events behind `/api/v1`, and a MIG manager reacting to config label changes."""

    layouts: dict[str, dict[str, int]]
    """mig-parted config name -> the MIG resources the device plugin advertises once it is applied."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    modes: dict[str, Mode] = field(default_factory=dict)
    notice_delay: float = 0.05
    """Seconds before the MIG manager notices a config change and sets pending (the state is absent meanwhile)."""
    apply_delay: float = 0.1
    """Seconds from pending to success."""
    fail_gets: dict[str, int] = field(default_factory=dict)
    """Node name -> how many of its next GETs answer 500 (-1: all of them)."""
    on_patch: list[Any] = field(default_factory=list)
    """Callables (node name, patch) run after each PATCH is applied: a test's way to act between two requests."""
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def add(self, *nodes: dict[str, Any]) -> None:
        for node in nodes:
            self.nodes[node["metadata"]["name"]] = node

    def node_calls(self) -> list[tuple[str, str]]:
        """The writes to nodes as (node, what): cordon, uncordon, relabel (a label patch)."""
        out: list[tuple[str, str]] = []
        for call in self.calls:
            if call.method != "PATCH" or call.node is None:
                continue
            body = call.body or {}
            if "unschedulable" in (body.get("spec") or {}):
                out.append((call.node, "cordon" if body["spec"]["unschedulable"] else "uncordon"))
            if CONFIG in ((body.get("metadata") or {}).get("labels") or {}):
                out.append((call.node, "relabel"))
        return out

    # handlers ----------------------------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> Call:
        body = await request.json() if request.can_read_body else None
        call = Call(request.method, request.path, dict(request.query), request.content_type, body)
        self.calls.append(call)
        return call

    async def list_nodes(self, request: web.Request) -> web.Response:
        await self._record(request)
        items = list(self.nodes.values())
        return web.json_response(
            {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
        )

    async def get_node(self, request: web.Request) -> web.Response:
        await self._record(request)
        name = request.match_info["name"]
        if self.fail_gets.get(name, 0):
            self.fail_gets[name] -= 1
            return status(500, "InternalError", "Internal error occurred: etcdserver: leader changed", name)
        if name not in self.nodes:
            return status(404, "NotFound", f'nodes "{name}" not found', name)
        call = self.calls[-1]
        call.state = (self.nodes[name]["metadata"].get("labels") or {}).get(STATE)
        return web.json_response(self.nodes[name])

    async def patch_node(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        name = request.match_info["name"]
        mode = self.modes.get(name, "ok")
        if mode == "patch-500":
            return status(500, "InternalError", "Internal error occurred: etcdserver: request timed out", name)
        if mode == "conflict-once":
            self.modes[name] = "ok"
            message = f'Operation cannot be fulfilled on nodes "{name}": the object has been modified'
            return status(409, "Conflict", message, name)
        if call.content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return status(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {call.content_type}"
            )
        if name not in self.nodes:
            return status(404, "NotFound", f'nodes "{name}" not found', name)
        node = self.nodes[name]
        before = (node["metadata"].get("labels") or {}).get(CONFIG)
        # our patches hold only maps, where a strategic merge patch means the same as a JSON merge patch
        self.nodes[name] = node = merge(node, call.body)
        after = (node["metadata"].get("labels") or {}).get(CONFIG)
        if after != before and after is not None:
            self._reconfigure(name, after)
        for hook in self.on_patch:
            hook(name, call.body)
        return web.json_response(node)

    async def list_pods(self, request: web.Request) -> web.Response:
        await self._record(request)
        selector = request.query.get("fieldSelector", "")
        items = self.pods
        if selector:
            key, _, value = selector.partition("=")
            if key != "spec.nodeName":
                return status(400, "BadRequest", f'field label not supported: "{key}"', kind="pods")
            items = [p for p in self.pods if p["spec"].get("nodeName") == value]
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
        )

    async def create_event(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        event = dict(call.body)
        event["metadata"] = {**event.get("metadata", {}), "namespace": request.match_info["namespace"]}
        self.events.append(event)
        return web.json_response(event, status=201)

    # the MIG manager ---------------------------------------------------------------------------------------

    def _label(self, name: str, state: str | None) -> None:
        if name in self.nodes:
            labels = self.nodes[name]["metadata"].setdefault("labels", {})
            if state is None:
                labels.pop(STATE, None)
            else:
                labels[STATE] = state

    def _advertise(self, name: str, resources: dict[str, int]) -> None:
        if name in self.nodes:
            allocatable = self.nodes[name]["status"].setdefault("allocatable", {})
            for key in [k for k in allocatable if k.startswith("nvidia.com/mig-")]:
                del allocatable[key]
            allocatable.update({k: str(v) for k, v in resources.items()})

    def _reconfigure(self, name: str, config: str) -> None:
        old = self._tasks.pop(name, None)
        if old is not None:
            old.cancel()
        self._tasks[name] = asyncio.get_running_loop().create_task(self._manage(name, config))

    async def _manage(self, name: str, config: str) -> None:
        await asyncio.sleep(self.notice_delay)
        self._label(name, "pending")
        await asyncio.sleep(self.apply_delay)
        self._advertise(name, {})  # the device plugin restarts: the old instances are gone
        self._label(name, "success")
        self._advertise(name, self.layouts[config])

    async def _cleanup(self, app: web.Application) -> None:
        for task in self._tasks.values():
            task.cancel()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.list_nodes)
        app.router.add_get("/api/v1/nodes/{name}", self.get_node)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch_node)
        app.router.add_get("/api/v1/pods", self.list_pods)
        app.router.add_post("/api/v1/namespaces/{namespace}/events", self.create_event)
        app.on_cleanup.append(self._cleanup)
        return app
