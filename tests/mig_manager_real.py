"""`mig-plan --apply` on the real control plane: a stand-in for NVIDIA's MIG manager and device plugin that works
through the API server, and the cluster a test sets up for it (the shipped RBAC applied, MIG nodes, pods).

The stand-in watches the nodes as the MIG manager does (`nvidia-mig-manager` acts when a node's
`nvidia.com/mig.config` label changes) and answers the way `reconfigure-mig.sh` does: `nvidia.com/mig.config.state`
`pending`, then `success` (or `failed`), after which the device plugin restarts and the node's capacity and
allocatable hold the layout's MIG instances. The instances come from the layout's mig-parted entries in the MIG
manager's ConfigMap (what the plan printed and the admin applied), else from mig-parted's stock layouts for the
node's GPU model, else from the names a test gives; a name none of them knows fails, as mig-parted fails on it.
Per node, a `Mode` picks one of the failures seen in the field.
"""

from __future__ import annotations

import threading
import urllib.error
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from gpupack.core.gpus.catalog import mig_model_of
from gpupack.core.gpus.geometry import counts_of, instances
from gpupack.core.gpus.stock import STOCK
from gpupack.core.kube import RawListWatch, RawWatch, ResourceExpired, api_client
from gpupack.core.objects import GFD_MIG_CAPABLE, MIG_CONFIG, MIG_CONFIG_STATE
from gpupack.testing.control_plane import ROOT, ControlPlane
from tests.audit_log import AuditLog, Request, audited_plane, service_account_user

CONFIG = MIG_CONFIG
STATE = MIG_CONFIG_STATE
MIG_PREFIX = "nvidia.com/mig-"
NAMESPACE = "gpupack-system"
ACCOUNT = "gpupack-mig-plan"
USER = service_account_user(NAMESPACE, ACCOUNT)
LAYOUTS_CONFIG_MAP = ("gpu-operator", "gpupack-mig-parted-config")
"""Where the shipped Role lets mig-plan read the MIG manager's layouts (manifests/mig-plan/rbac.yaml)."""
MANIFESTS = ROOT / "manifests" / "mig-plan"
PODS_NAMESPACE = "ml"
A100 = "NVIDIA-A100-SXM4-40GB"

Mode = Literal[
    "ok",
    "stuck-pending",  # gpu-operator #2833: pending forever
    "failed",
    "success-no-instances",  # mig-parted #18: "applied successfully", no instances created
    "slow-allocatable",  # success, the device plugin advertises the instances only later
    "vanishes",  # the node is deleted while the MIG manager works on it
]


@dataclass
class MigManager:
    """The MIG manager and the device plugin of every node, as one thread watching nodes through the API (with the
    admin's credentials: its own RBAC is the GPU Operator's, not the subject) and one thread per reconfiguration."""

    plane: ControlPlane
    config_map: tuple[str, str] = LAYOUTS_CONFIG_MAP
    layouts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Config names a test makes up -> the MIG resources they give (the ConfigMap and the stock names come
    first)."""
    modes: dict[str, Mode] = field(default_factory=dict)
    notice_delay: float = 0.05
    """Seconds before it notices a config change and sets pending (the state is absent meanwhile)."""
    apply_delay: float = 0.1
    """Seconds from pending to success or failed."""
    allocatable_delay: float = 0.3
    """Seconds from success to the instances in allocatable, in `slow-allocatable` mode."""
    _configs: dict[str, str | None] = field(default_factory=dict)
    _generation: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _watch: RawWatch | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    synced: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> MigManager:
        self._api = api_client(self.plane.admin_kubeconfig)
        self._lists = RawListWatch(self._api, request_timeout=10.0)
        thread = threading.Thread(target=self._run, name="mig-manager", daemon=True)
        self._threads.append(thread)
        thread.start()
        if not self.synced.wait(30):
            raise AssertionError("the MIG manager stand-in did not list the nodes")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        with self._lock:
            watch = self._watch
            for name in self._generation:
                self._generation[name] += 1
        if watch is not None:
            watch.close()
        for thread in self._threads:
            thread.join(15)
        self._api.close()

    def reset(self) -> None:
        """Forget the last test: its reconfigurations in flight stop writing, modes and delays are the defaults."""
        with self._lock:
            for name in self._generation:
                self._generation[name] += 1
            self.modes.clear()
            self.layouts.clear()
        self.notice_delay, self.apply_delay, self.allocatable_delay = 0.05, 0.1, 0.3

    # watching ------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items, version = self._lists.list("nodes")
                for node in items:
                    self._observe(node)
                self.synced.set()
                while not self._stop.is_set():
                    watch = self._lists.watch("nodes", version, 30)
                    with self._lock:
                        self._watch = watch
                    if self._stop.is_set():
                        watch.close()
                        return
                    for event in watch:
                        node = event.get("object") or {}
                        version = str((node.get("metadata") or {}).get("resourceVersion") or version)
                        if event.get("type") == "DELETED":
                            self._forget((node.get("metadata") or {}).get("name", ""))
                        elif event.get("type") in ("ADDED", "MODIFIED"):
                            self._observe(node)
            except ResourceExpired:
                continue
            except Exception:
                if self._stop.wait(0.2):
                    return

    def _observe(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name, config = str(meta.get("name")), (meta.get("labels") or {}).get(CONFIG)
        with self._lock:
            known = name in self._configs
            before = self._configs.get(name)
            self._configs[name] = config
        # A node as it registers already holds its layout: only a change of the label is work.
        if known and config != before and config is not None:
            self.reconfigure(name, config)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._configs.pop(name, None)
            self._generation[name] = self._generation.get(name, 0) + 1

    # reconfiguring -------------------------------------------------------------------------------------------

    def reconfigure(self, name: str, config: str) -> None:
        """Start applying `config` on `name` (a change already in progress there is abandoned)."""
        with self._lock:
            generation = self._generation[name] = self._generation.get(name, 0) + 1
        thread = threading.Thread(target=self._manage, args=(name, config, generation), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _current(self, name: str, generation: int) -> bool:
        return not self._stop.is_set() and self._generation.get(name) == generation

    def _write(self, name: str, generation: int, method: str, path: str, body: Any = None) -> bool:
        """One write, unless this reconfiguration was abandoned; False when it was, or the node is gone."""
        with self._lock:
            if not self._current(name, generation):
                return False
            try:
                self.plane.request(method, path, body, "application/merge-patch+json")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return False
                raise
        return True

    def _pause(self, seconds: float, name: str, generation: int) -> bool:
        return not self._stop.wait(seconds) and self._current(name, generation)

    def _label(self, name: str, generation: int, state: str) -> bool:
        return self._write(name, generation, "PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {STATE: state}}})

    def _advertise(self, name: str, generation: int, resources: Mapping[str, int]) -> bool:
        """The device plugin's MIG resources in capacity and allocatable: the old ones gone, these in their place."""
        node = self.plane.get(f"/api/v1/nodes/{name}")
        if node is None:
            return False
        old = {k: None for k in (node.get("status") or {}).get("allocatable") or {} if k.startswith(MIG_PREFIX)}
        resources_patch = {**old, **{k: str(v) for k, v in resources.items()}}
        body = {"status": {"capacity": resources_patch, "allocatable": resources_patch}}
        return self._write(name, generation, "PATCH", f"/api/v1/nodes/{name}/status", body)

    def _manage(self, name: str, config: str, generation: int) -> None:
        with suppress(Exception):  # the control plane stopping under it is not the test's subject
            mode = self.modes.get(name, "ok")
            if not self._pause(self.notice_delay, name, generation):
                return
            if mode == "vanishes":
                self._write(name, generation, "DELETE", f"/api/v1/nodes/{name}")
                return
            if not self._label(name, generation, "pending") or mode == "stuck-pending":
                return
            if not self._pause(self.apply_delay, name, generation):
                return
            resources = self.resources(name, config)
            if mode == "failed" or resources is None:
                self._label(name, generation, "failed")
                return
            if not (self._advertise(name, generation, {}) and self._label(name, generation, "success")):
                return  # the device plugin restarted: the old instances are gone
            if mode == "success-no-instances":
                return
            if mode == "slow-allocatable" and not self._pause(self.allocatable_delay, name, generation):
                return
            self._advertise(name, generation, resources)

    def resources(self, name: str, config: str) -> dict[str, int] | None:
        """The MIG resources `config` gives the node: a test's layout, else its mig-parted entries in the MIG
        manager's ConfigMap, else the stock layout of the node's model on each of its GPUs; None when none
        knows the name."""
        if config in self.layouts:
            return dict(self.layouts[config])
        node = self.plane.get(f"/api/v1/nodes/{name}") or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        gpus = int(labels.get("nvidia.com/gpu.count", "0"))
        namespace, config_map = self.config_map
        found = self.plane.get(f"/api/v1/namespaces/{namespace}/configmaps/{config_map}") or {}
        document = yaml.safe_load((found.get("data") or {}).get("config.yaml") or "{}") or {}
        entries = (document.get("mig-configs") or {}).get(config) or []
        per_gpu = []
        for entry in entries:
            if entry.get("mig-enabled"):
                devices = range(gpus) if entry.get("devices") == "all" else entry["devices"]
                per_gpu += [counts_of(entry.get("mig-devices") or {})] * len(devices)
        if per_gpu:
            return instances(per_gpu)
        model = mig_model_of(labels.get("nvidia.com/gpu.product", ""))
        stock = STOCK.get(config, {}).get(model or "")
        return instances([stock] * gpus) if stock is not None and gpus else None


# the cluster -----------------------------------------------------------------------------------------------------


def rendered_rbac(plane: ControlPlane) -> list[dict[str, Any]]:
    """`kubectl kustomize manifests/mig-plan` with the kit's kubectl: what `kubectl apply -k` would create."""
    text = plane.kubectl("kustomize", str(MANIFESTS)).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def granted(objects: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """(verb, API group, resource) of every rule of the Roles and ClusterRoles among `objects`."""
    return {
        (verb, group, resource)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o["rules"]
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def mig_node(
    name: str,
    config: str | None = "all-3g.20gb",
    state: str | None = "success",
    allocatable: Mapping[str, int] | None = None,
    gpus: int | None = 8,
    capable: bool = True,
    annotations: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(labels, allocatable, annotations) of an A100 node as GPU Feature Discovery, the MIG manager and the
    device plugin leave it."""
    labels = {"nvidia.com/gpu.product": A100}
    if gpus is not None:
        labels["nvidia.com/gpu.count"] = str(gpus)
    if capable:
        labels[GFD_MIG_CAPABLE] = "true"
    if config is not None:
        labels[CONFIG] = config
    if state is not None:
        labels[STATE] = state
    offered = {"cpu": "64", "memory": "512Gi", **{k: str(v) for k, v in (allocatable or {}).items()}}
    return labels, offered, dict(annotations or {})


def gpu_pod(
    name: str,
    node: str | None,
    resource: str | None = "nvidia.com/mig-1g.5gb",
    init: bool = False,
    namespace: str = PODS_NAMESPACE,
) -> dict[str, Any]:
    """A pod bound to `node` (None: pending), limiting one `resource` (None: CPU only) in a container or an init
    container."""
    container: dict[str, Any] = {"name": "c", "image": "registry.example/x:1"}
    if resource is not None:
        container["resources"] = {"limits": {resource: "1"}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.example/x:1"}]}
    if node is not None:
        spec["nodeName"] = node
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"] = [container]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@dataclass
class MigCluster:
    """The control plane with the shipped mig-plan RBAC applied, the MIG manager stand-in, and the audit log."""

    plane: ControlPlane
    manager: MigManager
    audit: AuditLog
    kubeconfig: Path
    """The mig-plan ServiceAccount's token (TokenRequest), as its pod would hold it."""
    objects: list[dict[str, Any]]
    """The rendered manifests/mig-plan, as applied."""
    since: int = 0

    def clean(self) -> None:
        """A cluster without nodes, pods or Events, and an audit mark: what one test sees is its own."""
        self.manager.reset()
        zero = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        self.plane.request("DELETE", "/api/v1/nodes", zero)
        self.plane.request("DELETE", f"/api/v1/namespaces/{PODS_NAMESPACE}/pods", zero)
        self.plane.request("DELETE", "/api/v1/namespaces/default/events", zero)
        with suppress(urllib.error.HTTPError):
            namespace, name = LAYOUTS_CONFIG_MAP
            self.plane.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        self.since = self.audit.mark()

    def add(
        self,
        name: str,
        config: str | None = "all-3g.20gb",
        state: str | None = "success",
        allocatable: Mapping[str, int] | None = None,
        unschedulable: bool = False,
        mode: Mode = "ok",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A MIG node, registered and Ready; cordoned by someone when `unschedulable`; `mode` for the MIG manager."""
        labels, offered, annotations = mig_node(name, config, state, allocatable, **kwargs)
        self.manager.modes[name] = mode
        node = self.plane.node(name, offered, labels)
        patch: dict[str, Any] = {}
        if annotations:
            patch["metadata"] = {"annotations": annotations}
        if unschedulable:
            patch["spec"] = {"unschedulable": True}
        if patch:
            node = self.plane.request("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
        return node

    def pod(self, pod: dict[str, Any], phase: str | None = None) -> dict[str, Any]:
        """Create the pod; with `phase`, its status as the kubelet reports it."""
        namespace = pod["metadata"]["namespace"]
        created: dict[str, Any] = self.plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        if phase is not None:
            path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status"
            created = self.plane.request("PATCH", path, {"status": {"phase": phase}}, "application/merge-patch+json")
        return created

    def node(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.plane.get(f"/api/v1/nodes/{name}")
        return found

    def events(self, node: str | None = None) -> list[dict[str, Any]]:
        """The Events about nodes in `default`, oldest first (of one node, when named)."""
        found = [e for e in self.plane.events("default") if e["involvedObject"].get("kind") == "Node"]
        return [e for e in found if node is None or e["involvedObject"]["name"] == node]

    def publish(self, configs: Mapping[str, Any]) -> None:
        """The MIG manager's ConfigMap with these mig-parted configs, where the shipped Role may read it."""
        namespace, name = LAYOUTS_CONFIG_MAP
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name},
            "data": {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": dict(configs)})},
        }
        self.plane.apply([body])

    def requests(self, user: str = USER) -> list[Request]:
        """What `user` (by default the mig-plan ServiceAccount) asked since `clean()`, with the answers."""
        return self.audit.requests(self.since, user)

    def node_writes(self, user: str = USER) -> list[tuple[str, str]]:
        """The node patches the API server accepted, as (node, what): cordon, uncordon, relabel."""
        out: list[tuple[str, str]] = []
        for r in self.requests(user):
            if r.verb != "patch" or r.resource != "nodes" or r.code != 200:
                continue
            body = r.body or {}
            if "unschedulable" in (body.get("spec") or {}):
                out.append((str(r.name), "cordon" if body["spec"]["unschedulable"] else "uncordon"))
            if CONFIG in ((body.get("metadata") or {}).get("labels") or {}):
                out.append((str(r.name), "relabel"))
        return out


def start(workdir: Path) -> Iterator[MigCluster]:
    """The control plane with audit, the namespaces the manifests expect, manifests/mig-plan applied as
    `kubectl apply -k` would, the ServiceAccount's token, and the MIG manager stand-in; stopped afterwards."""
    plane = audited_plane(workdir).start()
    try:
        for namespace in (NAMESPACE, LAYOUTS_CONFIG_MAP[0], PODS_NAMESPACE):
            plane.namespace(namespace)
        objects = rendered_rbac(plane)
        plane.apply(objects)
        kubeconfig = plane.service_account_kubeconfig(NAMESPACE, ACCOUNT)
        with MigManager(plane) as manager:
            yield MigCluster(plane, manager, AuditLog(workdir / "audit.log"), kubeconfig, objects)
    finally:
        plane.stop()
