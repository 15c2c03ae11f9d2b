"""The extender's watch cache and the webhook's PriorityClass, node and Lease readers against a real kube-apiserver
(`gpupack.testing.control_plane`), built as the services build them (`gpupack.core.kube` and the kubernetes client, a
kubeconfig) and authenticated with their ServiceAccounts' tokens under the shipped RBAC, so a missing verb fails.

What the real API server shows here: pagination with its continue tokens, watch events and bookmarks, a dropped
watch resumed from its resourceVersion, the 410 Gone of a version the server no longer has (after a restart of
kube-apiserver, and after an etcd compaction with the watch cache off), RBAC's 403 and a deleted Lease's 404.
The faults it cannot be made to produce on demand stay on the HTTP fakes of test_informer.py, test_kube.py and
test_lease_cache.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpupack.core.admitted import admitted_pod
from gpupack.core.cluster import PriorityClassInfo, facts
from gpupack.core.kube import (
    PAGE_SIZE,
    ClusterFactsCache,
    Kind,
    KubeClusterReader,
    KubeLeaseReader,
    RawListWatch,
    RawWatch,
    api_client,
    offered_by_node_overlays,
)
from gpupack.core.lease_cache import LeaseCache
from gpupack.core.policy import SchedulerPolicy, parse_policy
from gpupack.core.server import ServeOptions
from gpupack.core.telemetry import LeaseMetrics
from gpupack.demo.cluster import leader_lease
from gpupack.extender.informer import KINDS, Backoff, Informer
from gpupack.extender.service import ExtenderConfig, build_app, load_lists
from gpupack.extender.state import ClusterState
from gpupack.testing.control_plane import ControlPlane, tools, wait_until
from gpupack.testing.dcgm import Gpu, Node, exposition
from gpupack.testing.dra import gpu_slice
from gpupack.webhook.mutate import MutationContext, plan
from gpupack.webhook.patches import apply_patch
from tests.conftest import RECORDED, recorded_text
from tests.extender_kit import gpu_pod, policy

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[1]
NS = "gpupack-system"
TEAM = "ml"
GPU = "nvidia.com/gpu"
POLICY = policy()
FAST = Backoff(initial=0.1, cap=1.0)
"""The informer's back-off here: production's (0.8 s doubling to 30 s) would only make the tests wait."""
NOW = 1_800_000_000.0
KEY = (NS, "gpupack-scheduler")
DEFAULTS = parse_policy(b"").scheduler
LIVE_GAUGE = ("gpupack_scheduler_lease_live", {"lease": "gpupack-system/gpupack-scheduler"})
LEADER = "gpupack-scheduler-6f7c9d-x2k9q_3b1f"


# the kit: control planes and the shipped RBAC -------------------------------------------------------------------


def start_plane(workdir: Path, extra_args: tuple[str, ...] = ()) -> ControlPlane:
    """A control plane whose etcd sends watch progress notifications every second (its default is every ten
    minutes): kube-apiserver's watch cache then learns of revisions other resources made, and the bookmarks it
    sends a watch carry them, as in a cluster that has run for a while."""
    plane = ControlPlane(workdir, extra_args)
    plane.etcd.argv.append("--experimental-watch-progress-notify-interval=1s")
    return plane.start()


def extender_own_rbac() -> list[dict[str, Any]]:
    """The ServiceAccount and the extender container's own ClusterRole and binding from the shipped
    manifests/extender/rbac.yaml. The file also binds kube-scheduler's built-in roles, which list and watch pods
    and nodes too and would hide a verb missing from the extender's role; the extender's rules must suffice."""
    docs = yaml.safe_load_all((ROOT / "manifests" / "extender" / "rbac.yaml").read_text())
    wanted = {("ServiceAccount", "gpupack-scheduler"), ("ClusterRole", "gpupack-extender")}
    wanted.add(("ClusterRoleBinding", "gpupack-extender"))
    return [d for d in docs if d and (d["kind"], d["metadata"]["name"]) in wanted]


def can(plane: ControlPlane, kubeconfig: Path, *args: str) -> bool:
    """`kubectl auth can-i` as the kubeconfig's user (RBAC is read from informers: a new binding takes a moment)."""
    return plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False).stdout.strip() == "yes"


@dataclass
class Cluster:
    """A running control plane with gpupack's namespace, RBAC and ServiceAccount kubeconfigs."""

    plane: ControlPlane
    extender: Path
    """A kubeconfig with a token of gpupack-scheduler, the extender's ServiceAccount."""
    webhook: Path
    """A kubeconfig with a token of gpupack-webhook."""


def install(plane: ControlPlane) -> Cluster:
    """The shipped namespace and RBAC (`kubectl apply -f`), the test namespace, and the two services' tokens."""
    plane.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"))
    plane.kubectl("apply", "-n", NS, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    plane.kubectl("apply", "-n", NS, "-f", "-", stdin=yaml.safe_dump_all(extender_own_rbac()))
    plane.namespace(TEAM)
    extender = plane.service_account_kubeconfig(NS, "gpupack-scheduler")
    webhook = plane.service_account_kubeconfig(NS, "gpupack-webhook")
    # The bindings take a moment to reach the authorizer. Waiting on a `get` only, so that a verb missing from
    # the shipped roles fails the test that needs it, not this fixture.
    wait_until(lambda: can(plane, extender, "get", "nodes"), 30, "the extender's ClusterRoleBinding")
    wait_until(lambda: can(plane, webhook, "get", "priorityclasses"), 30, "the webhook's ClusterRoleBinding")
    return Cluster(plane, extender, webhook)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """kube-apiserver as a cluster runs it, with its watch cache."""
    plane = start_plane(tmp_path_factory.mktemp("watch") / "plane")
    try:
        yield install(plane)
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """kube-apiserver without its watch cache, and without its own periodic compaction: lists and watches go to
    etcd, so a compaction the test makes expires the versions before it (the watch cache would go on serving
    them from memory)."""
    flags = ("--watch-cache=false", "--etcd-compaction-interval=0")
    plane = start_plane(tmp_path_factory.mktemp("uncached") / "plane", flags)
    try:
        yield install(plane)
    finally:
        plane.stop()


def compact(plane: ControlPlane) -> int:
    """Compact etcd at its current revision (physically): every older revision is gone. Returns the revision."""
    etcdctl = shutil.which("etcdctl")
    if etcdctl is None:
        pytest.fail("etcdctl is missing: `make system-deps` installs Debian's etcd-client")

    def run(*args: str) -> str:
        done = subprocess.run(
            [etcdctl, f"--endpoints={plane.etcd_url}", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    revision = int(json.loads(run("endpoint", "status", "-w", "json"))[0]["Status"]["header"]["revision"])
    run("compact", str(revision), "--physical")
    return revision


def restart_apiserver(plane: ControlPlane) -> None:
    """Stop kube-apiserver (SIGTERM: it closes every watch) and start it again on the same etcd."""
    plane.apiserver.stop()
    plane.apiserver.start()
    wait_until(plane._ready, 90, "kube-apiserver ready again")


# the kit: objects as a cluster's users and kubelets make them ---------------------------------------------------


def gpu_node(plane: ControlPlane, name: str, allocatable: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Ready node with 64 CPUs, 512Gi and `allocatable` (8 whole GPUs unless told)."""
    return plane.node(name, {"cpu": "64", "memory": "512Gi", **(allocatable or {GPU: "8"})})


def pod_body(name: str, node: str | None = None, gpus: int = 1, namespace: str = TEAM) -> dict[str, Any]:
    """A pod asking for `gpus` whole GPUs, 1 CPU and 4Gi; created bound when `node` is given."""
    body = gpu_pod(GPU, gpus, name=name)
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["containers"][0]["image"] = "registry.example/model:1"
    if node is not None:
        body["spec"]["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", **body}


def create_pod(plane: ControlPlane, name: str, node: str | None = None, gpus: int = 1) -> dict[str, Any]:
    created: dict[str, Any] = plane.request("POST", f"/api/v1/namespaces/{TEAM}/pods", pod_body(name, node, gpus))
    return created


def bind(plane: ControlPlane, name: str, node: str) -> None:
    """Bind a pending pod through the `pods/binding` subresource, as kube-scheduler does."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}}
    plane.request("POST", f"/api/v1/namespaces/{TEAM}/pods/{name}/binding", body)


def finish(plane: ControlPlane, name: str) -> dict[str, Any]:
    """The kubelet reports the pod Succeeded: its GPUs are free again."""
    done: dict[str, Any] = plane.request(
        "PATCH",
        f"/api/v1/namespaces/{TEAM}/pods/{name}/status",
        {"status": {"phase": "Succeeded"}},
        "application/merge-patch+json",
    )
    return done


def delete(plane: ControlPlane, path: str) -> Any:
    """Delete at once (no grace period: there is no kubelet to confirm)."""
    return plane.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


def delete_pod(plane: ControlPlane, name: str) -> Any:
    return delete(plane, f"/api/v1/namespaces/{TEAM}/pods/{name}")


def set_allocatable(plane: ControlPlane, name: str, allocatable: Mapping[str, str]) -> dict[str, Any]:
    """The device plugin reports other counts: the node's status changes (a MODIFIED event)."""
    node: dict[str, Any] = plane.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}},
        "application/strategic-merge-patch+json",
    )
    return node


def uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def version(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


# the kit: what the API holds, as the extender would read it from a fresh list -----------------------------------


def api_state(plane: ControlPlane) -> ClusterState:
    """The state a fresh full list of the API's nodes and pods gives (`load_lists`, the extender's offline path)."""
    state = ClusterState()
    nodes = plane.request("GET", "/api/v1/nodes")["items"]
    pods = plane.request("GET", "/api/v1/pods")["items"]
    load_lists(state, nodes, pods, POLICY)
    return state


def differences(cache: ClusterState, api: ClusterState) -> list[str]:
    """Where the watch cache and the API disagree: nodes, bound pods, and each node's usage."""
    out = [
        f"node {n}: cache {cache.nodes.get(n)} api {api.nodes.get(n)}"
        for n in sorted(set(cache.nodes) | set(api.nodes))
        if cache.nodes.get(n) != api.nodes.get(n)
    ]
    out += [
        f"pod {k}: cache {cache.pods.get(k)} api {api.pods.get(k)}"
        for k in sorted(set(cache.pods) | set(api.pods))
        if cache.pods.get(k) != api.pods.get(k)
    ]
    nodes = {p.node for p in [*cache.pods.values(), *api.pods.values()]} | set(cache.nodes) | set(api.nodes)
    for n in sorted(nodes):
        mine = {r: v for r, v in cache.used(n).items() if v}
        theirs = {r: v for r, v in api.used(n).items() if v}
        if mine != theirs:
            out.append(f"usage of {n}: cache {mine} api {theirs}")
    return out


# the kit: a link that can be cut, and a list + watch that writes down what it was asked -------------------------


class Link:
    """A TCP relay in front of kube-apiserver that a test can cut, as a network partition or a restarted load
    balancer cuts a watch: TLS and the token pass through untouched, and the API server sees its connections
    closed. While refusing, a new connection is closed before its TLS handshake."""

    def __init__(self, target: int) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="link", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.setblocking(True)
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), 5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(source, sink)

    def _drop(self, *sockets: socket.socket) -> None:
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
            with self._lock:
                self._sockets.discard(s)

    def refuse(self) -> None:
        """Refuse new connections; the open ones go on."""
        self._open.clear()

    def cut(self) -> None:
        """Close every connection through the link, and refuse new ones until `restore()`."""
        self.refuse()
        with self._lock:
            sockets = list(self._sockets)
        self._drop(*sockets)

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
        self._thread.join(5)


def through(kubeconfig: Path, link: Link) -> Path:
    """A copy of the kubeconfig whose server is the link (the same CA: the API server's certificate names
    127.0.0.1)."""
    config = json.loads(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{link.port}"
    path = kubeconfig.with_name(f"{kubeconfig.stem}-link-{link.port}.kubeconfig")
    path.write_text(json.dumps(config))
    return path


class RecordedWatch:
    """A RawWatch whose bookmarks are written down as they pass."""

    def __init__(self, stream: RawWatch, kind: Kind, bookmarks: list[tuple[Kind, str]]) -> None:
        self._stream = stream
        self._kind = kind
        self._bookmarks = bookmarks

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for event in self._stream:
            if event.get("type") == "BOOKMARK":
                self._bookmarks.append((self._kind, str(event["object"]["metadata"]["resourceVersion"])))
            yield event

    def close(self) -> None:
        self._stream.close()


@dataclass
class Recording:
    """The extender's RawListWatch, and what the informer asked of it: each list's start (kind and the list's
    resourceVersion), the pages read, each watch's starting version and the bookmarks received. A kind in `hold`
    has its next list stop after the first page until the event is set (`held` says it got there)."""

    inner: RawListWatch
    lists: list[tuple[Kind, str]] = field(default_factory=list)
    pages_read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    watches: list[tuple[Kind, str]] = field(default_factory=list)
    bookmarks: list[tuple[Kind, str]] = field(default_factory=list)
    hold: dict[str, threading.Event] = field(default_factory=dict)
    held: threading.Event = field(default_factory=threading.Event)

    def pages(self, kind: Kind) -> Iterator[tuple[list[dict[str, Any]], str]]:
        hold = self.hold.pop(kind, None)
        for number, (items, list_version) in enumerate(self.inner.pages(kind)):
            if number == 0:
                self.lists.append((kind, list_version))
            self.pages_read[kind] += 1
            yield items, list_version
            if hold is not None and number == 0:
                self.held.set()
                hold.wait(120)

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> RecordedWatch:
        self.watches.append((kind, resource_version))
        return RecordedWatch(self.inner.watch(kind, resource_version, timeout_seconds), kind, self.bookmarks)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Watching:
    """An informer built as the extender builds it, running against a real API server through a link."""

    plane: ControlPlane
    informer: Informer
    source: Recording
    link: Link
    task: asyncio.Task[None]
    log: _Lines

    @property
    def state(self) -> ClusterState:
        return self.informer.state

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
        """Wait until `check()` holds (the informer reads in threads, so poll); fail naming `what`."""
        deadline = time.monotonic() + timeout
        while not check():
            assert not self.task.done(), self.task
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not reached in {timeout:g}s; counters {self.informer.counters}; "
                    f"last log lines {self.log.lines[-3:]}"
                )
            await asyncio.sleep(0.05)

    async def synced(self) -> None:
        await self.until(lambda: self.informer.synced.is_set(), "first lists applied")

    async def matches_api(self, timeout: float = 60.0) -> None:
        """Wait until the cache equals what a fresh list of the API gives."""
        deadline = time.monotonic() + timeout
        while True:
            assert not self.task.done(), self.task
            left = differences(self.state, await asyncio.to_thread(api_state, self.plane))
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the cache differs from the API: {left[:5]}; counters {self.informer.counters}")
            await asyncio.sleep(0.2)

    def gpus_used(self, node: str) -> int:
        return self.state.used(node).get(GPU, 0)

    def allocatable(self, node: str) -> Mapping[str, int]:
        """The node's allocatable in the cache; empty when the cache has no such node."""
        record = self.state.nodes.get(node)
        return record.allocatable if record is not None else {}


@asynccontextmanager
async def watching(
    cluster: Cluster,
    *,
    page_size: int = PAGE_SIZE,
    watch_timeout: int = 300,
    refuse: bool = False,
    hold: Mapping[str, threading.Event] | None = None,
) -> AsyncIterator[Watching]:
    """An informer over `RawListWatch(api_client(kubeconfig))` as `extender.service` builds it, authenticated as
    gpupack-scheduler, through a `Link`; cancelled on the way out. Fails if the API server refused it anything."""
    link = Link(cluster.plane.port)
    if refuse:
        link.refuse()
    api = api_client(through(cluster.extender, link))
    gates = dict(hold or {})
    source = Recording(RawListWatch(api, page_size=page_size), hold=dict(gates))
    informer = Informer(source, ClusterState(), lambda: POLICY, backoff=FAST, watch_timeout=watch_timeout)
    lines = _Lines()
    logger = logging.getLogger("gpupack.extender.informer")
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    task = asyncio.create_task(informer.run())
    try:
        yield Watching(cluster.plane, informer, source, link, task, lines)
        refused = [line for line in lines.lines if "Forbidden" in line]
        assert not refused, f"the API server refused the extender's ServiceAccount: {refused[:3]}"
    finally:
        for gate in gates.values():
            gate.set()  # a list still held lets go
        task.cancel()
        with suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        logger.removeHandler(lines)
        logger.setLevel(level)
        link.close()
        api.close()


# the extender's informer ----------------------------------------------------------------------------------------


async def test_first_list_fills_the_cache_page_by_page_and_only_then_it_is_synced(cluster: Cluster) -> None:
    plane = cluster.plane
    for name in ("first-n1", "first-n2", "first-n3"):
        gpu_node(plane, name)
    create_pod(plane, "first-a", "first-n1")
    create_pod(plane, "first-b", "first-n1", 2)
    create_pod(plane, "first-c", "first-n2")
    pending = create_pod(plane, "first-pending")
    async with watching(cluster, page_size=2, refuse=True) as w:
        await w.until(lambda: w.informer.counters.errors >= 2, "list attempts refused")
        assert not w.state.synced and not w.informer.synced.is_set()
        w.link.restore()
        await w.synced()
        versions = dict(w.informer.resource_versions)
        assert versions == {kind: v for kind, v in w.source.lists}  # each watch starts where its list was taken
        assert w.state.synced
        assert {"first-n1", "first-n2", "first-n3"} <= set(w.state.nodes)
        assert w.gpus_used("first-n1") == 3 and w.gpus_used("first-n2") == 1 and w.state.used("first-n3") == {}
        assert w.state.used("first-n1")["cpu"] == 2000
        assert uid(pending) not in w.state.pods  # pending: not counted
        # two objects a page: every page was read, through the API server's continue tokens
        assert w.source.pages_read["pods"] >= 2 and w.source.pages_read["nodes"] >= 2
        assert w.informer.counters.lists == len(KINDS)
        await w.matches_api()


async def test_added_modified_and_deleted_pods_update_the_usage_of_their_node(cluster: Cluster) -> None:
    plane = cluster.plane
    for name in ("events-n1", "events-n2", "events-n3"):
        gpu_node(plane, name)
    create_pod(plane, "events-a", "events-n1")
    create_pod(plane, "events-b", "events-n1", 2)
    create_pod(plane, "events-c", "events-n2")
    create_pod(plane, "events-pending")
    async with watching(cluster) as w:
        await w.synced()
        create_pod(plane, "events-d", "events-n3", 4)
        await w.until(lambda: w.gpus_used("events-n3") == 4, "d counted on n3")
        finish(plane, "events-d")  # Succeeded: frees its GPUs
        delete_pod(plane, "events-b")
        bind(plane, "events-pending", "events-n2")  # kube-scheduler's binding: a MODIFIED event with nodeName
        last = version(plane.pod(TEAM, "events-pending") or {})
        await w.until(lambda: w.gpus_used("events-n1") == 1 and w.gpus_used("events-n2") == 2, "b gone, pending bound")
        assert w.gpus_used("events-n3") == 0
        assert int(w.informer.resource_versions["pods"]) >= last
        assert w.informer.counters.relists == 0
        await w.matches_api()


async def test_node_events_add_replace_and_forget_nodes(cluster: Cluster) -> None:
    plane = cluster.plane
    for name in ("nodes-n1", "nodes-n2"):
        gpu_node(plane, name)
    async with watching(cluster) as w:
        await w.synced()
        gpu_node(plane, "nodes-n4", {GPU: "4"})
        last = version(set_allocatable(plane, "nodes-n1", {"cpu": "64", "memory": "512Gi", GPU: "2"}))
        delete(plane, "/api/v1/nodes/nodes-n2")
        await w.until(lambda: "nodes-n4" in w.state.nodes and "nodes-n2" not in w.state.nodes, "n4 added, n2 gone")
        await w.until(lambda: w.state.nodes["nodes-n1"].allocatable[GPU] == 2, "n1's new allocatable")
        assert w.state.nodes["nodes-n4"].allocatable[GPU] == 4
        assert int(w.informer.resource_versions["nodes"]) >= last
        await w.matches_api()


async def test_a_node_deleted_and_recreated_under_its_name_is_the_new_node_only(cluster: Cluster) -> None:
    plane = cluster.plane
    first = gpu_node(plane, "again-n1", {GPU: "8"})
    mig = {"nvidia.com/mig-1g.5gb": "7"}
    async with watching(cluster) as w:
        await w.synced()
        delete(plane, "/api/v1/nodes/again-n1")
        second = gpu_node(plane, "again-n1", mig)  # same name, new uid, MIG instead of whole GPUs
        assert uid(second) != uid(first)
        await w.until(lambda: "nvidia.com/mig-1g.5gb" in w.allocatable("again-n1"), "the second node")
        assert GPU not in w.state.nodes["again-n1"].allocatable
        await w.matches_api()
        # again while the informer is cut off: it learns of both events when it is back
        w.link.cut()
        delete(plane, "/api/v1/nodes/again-n1")
        third = gpu_node(plane, "again-n1", {GPU: "2"})
        assert uid(third) not in (uid(first), uid(second))
        w.link.restore()
        await w.until(lambda: w.allocatable("again-n1").get(GPU) == 2, "the third node")
        assert "nvidia.com/mig-1g.5gb" not in w.state.nodes["again-n1"].allocatable
        await w.matches_api()


async def test_a_bookmark_moves_the_version_the_next_watch_starts_from(cluster: Cluster) -> None:
    plane = cluster.plane
    gpu_node(plane, "mark-n1")
    last_pod = version(create_pod(plane, "mark-a", "mark-n1"))
    # a write of another kind: etcd's revision moves past the last pod event, and its progress notification
    # tells the pods' watch cache, whose bookmarks then carry that revision
    plane.request("POST", f"/api/v1/namespaces/{TEAM}/configmaps", {"metadata": {"name": "mark"}, "data": {}})
    async with watching(cluster, watch_timeout=3) as w:  # a bookmark comes 2 s before each watch's end
        await w.synced()
        pods_before = dict(w.state.pods)

        def marked() -> list[str]:
            return [v for kind, v in w.source.bookmarks if kind == "pods" and int(v) > last_pod]

        await w.until(marked, "a pods bookmark past the last pod event")
        await w.until(lambda: any(("pods", v) in w.source.watches for v in marked()), "a watch from the bookmark")
        assert int(w.informer.resource_versions["pods"]) > last_pod
        assert w.informer.counters.lists == len(KINDS) and w.informer.counters.relists == 0  # no list again
        assert w.state.pods == pods_before


async def test_a_dropped_connection_resumes_from_the_last_version_and_catches_up(cluster: Cluster) -> None:
    plane = cluster.plane
    for name in ("drop-n1", "drop-n3"):
        gpu_node(plane, name)
    create_pod(plane, "drop-a", "drop-n1")
    create_pod(plane, "drop-b", "drop-n1", 2)
    async with watching(cluster) as w:
        await w.synced()
        create_pod(plane, "drop-d", "drop-n3")
        await w.until(lambda: w.gpus_used("drop-n3") == 1, "d counted")
        errors = w.informer.counters.errors
        w.link.cut()
        await w.until(lambda: w.informer.counters.errors > errors, "the cut noticed")
        seen = w.informer.resource_versions["pods"]
        watched = len(w.source.watches)
        # while the informer is away
        create_pod(plane, "drop-f", "drop-n3")
        delete_pod(plane, "drop-a")
        assert w.gpus_used("drop-n3") == 1 and w.gpus_used("drop-n1") == 3  # the cache keeps its state meanwhile
        w.link.restore()
        await w.until(lambda: w.gpus_used("drop-n3") == 2 and w.gpus_used("drop-n1") == 2, "events caught up")
        assert ("pods", seen) in w.source.watches[watched:]  # resumed from where it stopped
        assert w.informer.counters.lists == len(KINDS) and w.informer.counters.relists == 0
        assert w.informer.counters.errors >= 1
        await w.matches_api()


async def test_a_restarted_api_server_ends_the_watch_and_its_410_relists_the_cache(cluster: Cluster) -> None:
    plane = cluster.plane
    for name in ("restart-n1", "restart-n2"):
        gpu_node(plane, name)
    create_pod(plane, "restart-a", "restart-n1")
    create_pod(plane, "restart-b", "restart-n1", 2)
    async with watching(cluster) as w:
        await w.synced()
        w.link.refuse()  # kube-apiserver itself ends the watches; the link keeps the informer off until told
        await asyncio.to_thread(restart_apiserver, plane)
        # The new kube-apiserver's watch cache starts from etcd's current revision: the informer's version is
        # older than anything it keeps.
        delete_pod(plane, "restart-b")
        create_pod(plane, "restart-c", "restart-n2", 4)
        delete(plane, "/api/v1/nodes/restart-n1")
        gpu_node(plane, "restart-n1", {GPU: "4"})
        w.link.restore()
        await w.until(lambda: w.informer.counters.relists == len(KINDS), "every kind listed again")
        assert any("too old resource version" in line for line in w.log.lines), w.log.lines[-5:]
        assert w.gpus_used("restart-n2") == 4 and w.gpus_used("restart-n1") == 1
        assert w.allocatable("restart-n1")[GPU] == 4
        await w.matches_api()


async def test_a_watch_whose_version_was_compacted_away_gets_410_and_lists_again(uncached: Cluster) -> None:
    plane = uncached.plane
    for name in ("gone-n1", "gone-n2", "gone-n3"):
        gpu_node(plane, name)
    a = create_pod(plane, "gone-a", "gone-n1")
    create_pod(plane, "gone-b", "gone-n1", 2)
    c = create_pod(plane, "gone-c", "gone-n2")
    async with watching(uncached) as w:
        await w.synced()
        errors = w.informer.counters.errors
        w.link.cut()
        await w.until(lambda: w.informer.counters.errors > errors, "the cut noticed")
        stale = dict(w.informer.resource_versions)
        # while the informer is away: b is deleted, e appears on n3, n2 is replaced, and 200 events come and go
        delete_pod(plane, "gone-b")
        e = create_pod(plane, "gone-e", "gone-n3", 2)
        delete(plane, "/api/v1/nodes/gone-n2")
        gpu_node(plane, "gone-n2", {GPU: "4"})
        for i in range(100):
            create_pod(plane, f"gone-churn-{i}", "gone-n3")
            delete_pod(plane, f"gone-churn-{i}")
        revision = compact(plane)
        assert all(int(v) < revision for v in stale.values())
        lists = len(w.source.lists)
        w.link.restore()
        await w.until(lambda: w.informer.counters.relists == len(KINDS), "every kind listed again")
        assert any("resourceVersion expired" in line for line in w.log.lines)
        await w.until(lambda: w.gpus_used("gone-n3") == 2, "e counted")
        assert w.gpus_used("gone-n1") == 1 and w.gpus_used("gone-n2") == 1
        assert w.state.nodes["gone-n2"].allocatable[GPU] == 4
        here = [key for key, pod in w.state.pods.items() if pod.node.startswith("gone-")]
        assert sorted(here) == sorted(uid(p) for p in (a, c, e))
        # and watches from the new lists' versions
        relisted = w.source.lists[lists:]
        await w.until(lambda: all(started in w.source.watches for started in relisted), "watches from the new lists")
        await w.matches_api()


async def test_a_continue_token_expired_mid_list_lists_again_from_the_start(uncached: Cluster) -> None:
    plane = uncached.plane
    gpu_node(plane, "token-n1")
    for i in range(3):
        create_pod(plane, f"token-{i}", "token-n1")
    gate = threading.Event()
    async with watching(uncached, page_size=2, hold={"pods": gate}) as w:
        await w.until(w.source.held.is_set, "the first page of pods read")
        late = create_pod(plane, "token-late", "token-n1", 3)
        compact(plane)  # the list's revision is gone: its continue token expires (HTTP 410)
        gate.set()
        await w.synced()
        assert [kind for kind, _ in w.source.lists].count("pods") == 2  # listed again, from the first page
        assert w.informer.counters.lists == len(KINDS) and w.informer.counters.errors >= 1
        assert uid(late) in w.state.pods and w.gpus_used("token-n1") == 6
        await w.matches_api()


async def test_a_burst_of_a_thousand_pod_events_leaves_the_cache_equal_to_the_api(cluster: Cluster) -> None:
    plane = cluster.plane
    nodes = [f"burst-n{i}" for i in range(4)]
    for name in nodes:
        gpu_node(plane, name, {GPU: "1000"})

    def life(i: int) -> None:
        """One pod's life: created bound (even i) or bound later through pods/binding, maybe finished, maybe
        deleted."""
        name, node = f"burst-{i}", nodes[i % 4]
        if i % 2 == 0:
            create_pod(plane, name, node)
        else:
            create_pod(plane, name)
            bind(plane, name, node)
        if i % 4 == 1:
            finish(plane, name)
        if i % 3 == 0:
            delete_pod(plane, name)

    count = 480  # 480 created, 240 bound later, 120 finished, 160 deleted: 1,000 events
    expected = dict.fromkeys(nodes, 0)
    for i in range(count):
        if i % 4 != 1 and i % 3 != 0:
            expected[nodes[i % 4]] += 1
    async with watching(cluster) as w:
        await w.synced()
        events = w.informer.counters.events
        started = time.monotonic()

        def burst() -> None:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(life, range(count)))

        await asyncio.to_thread(burst)
        written = time.monotonic() - started
        await w.until(lambda: {n: w.gpus_used(n) for n in nodes} == expected, "the burst's usage", timeout=120)
        await w.matches_api(timeout=120)
        assert w.informer.counters.events - events >= 1000, (w.informer.counters, written)
        assert w.informer.counters.relists == 0


async def test_a_list_replays_each_nodes_pods_in_the_order_they_were_bound(cluster: Cluster) -> None:
    plane = cluster.plane
    gpu_node(plane, "order-n3")
    # The list returns the pods by name (x, y, z); they were bound z, y, x, and GPUs went out in that order.
    for name, gpus, scheduled in (("order-x", 4, "10:00:02"), ("order-y", 2, "10:00:01"), ("order-z", 1, "10:00:00")):
        create_pod(plane, name, "order-n3", gpus)
        condition = {"type": "PodScheduled", "status": "True", "lastTransitionTime": f"2026-11-29T{scheduled}Z"}
        plane.request(
            "PATCH",
            f"/api/v1/namespaces/{TEAM}/pods/{name}/status",
            {"status": {"conditions": [condition]}},
            "application/strategic-merge-patch+json",
        )
    async with watching(cluster) as w:
        await w.synced()
        requests, _ = w.state.bound_on("order-n3")
        assert [dict(r)[GPU] for r in requests] == [1, 2, 4]


async def test_extender_service_serves_from_the_watch_once_listed(cluster: Cluster, aiohttp_client: Any) -> None:
    """`gpupack extender --kubeconfig`: not ready until the first list; then /filter reads the watched state and
    /metrics counts the watch."""
    plane = cluster.plane
    gpu_node(plane, "svc-n1")
    create_pod(plane, "svc-a", "svc-n1", 8)
    link = Link(plane.port)
    link.refuse()
    try:
        config = ExtenderConfig(None, ServeOptions(), kubeconfig=through(cluster.extender, link))
        client_ = await aiohttp_client(build_app(config, CollectorRegistry()))
        await asyncio.sleep(1)
        assert (await client_.get("/readyz")).status == 503
        link.restore()
        deadline = time.monotonic() + 60
        while (await client_.get("/readyz")).status != 200:
            assert time.monotonic() < deadline, "never synced"
            await asyncio.sleep(0.05)
        args = {"Pod": gpu_pod(GPU, 1, "training", name="b"), "NodeNames": ["svc-n1"], "Nodes": None}
        body = await (await client_.post("/filter", json=args)).json()
        assert body["FailedNodes"] == {"svc-n1": f"0 of 8 {GPU} free, pod needs 1"}
        metrics = await (await client_.get("/metrics")).text()
        assert f"gpupack_extender_watch_lists_total {len(KINDS)}.0" in metrics
    finally:
        link.close()


async def test_a_dra_nodes_gpus_carry_their_utilization_from_the_first_list_whatever_the_host_label(
    cluster: Cluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    """DCGM series whose host label is the exporter pod's name (NODE_NAME unset) land on the node whose
    ResourceSlice publishes their GPU's UUID, as soon as the first list has brought the slices: with the live
    metrics polled once an hour here, only the read right after that list can have put them there."""
    plane = cluster.plane
    plane.node("svc-dra", {"cpu": "64", "memory": "512Gi"})
    plane.apply([gpu_slice("svc-dra", "H100-80GB", 2)])
    text = exposition([Node("svc-dra", [Gpu(40.0), Gpu(60.0)])]).replace('hostname="svc-dra"', 'hostname="dcgm-x7k2p"')
    metrics = tmp_path / "dcgm.txt"
    metrics.write_text(text)
    policy = tmp_path / "policy.yaml"
    policy.write_text("extender:\n  metrics:\n    pollSeconds: 3600\n")
    config = ExtenderConfig(policy, ServeOptions(), kubeconfig=cluster.extender, metrics_file=metrics)
    client_ = await aiohttp_client(build_app(config, CollectorRegistry()))

    async def utils() -> list[float | None]:
        state = await (await client_.get("/state")).json()
        gpus = state["nodes"].get("svc-dra", {}).get("utilization", {})
        return sorted(g["util"] for g in gpus.values()) if isinstance(gpus, dict) else []

    deadline = time.monotonic() + 60
    while await utils() != [0.4, 0.6]:
        assert time.monotonic() < deadline, f"the DRA node's GPUs never got their utilization: {await utils()}"
        await asyncio.sleep(0.2)


# the webhook's PriorityClass and node reader ----------------------------------------------------------------------


def api_facts(plane: ControlPlane) -> tuple[dict[str, PriorityClassInfo], frozenset[str]]:
    """What the API holds: every PriorityClass's value and preemption policy, and the NVIDIA resources some node
    offers a count above zero of."""
    classes = {
        pc["metadata"]["name"]: PriorityClassInfo(pc["value"], pc.get("preemptionPolicy") or "PreemptLowerPriority")
        for pc in plane.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")["items"]
    }
    advertised = {
        resource
        for node in plane.request("GET", "/api/v1/nodes")["items"]
        for resource, count in node["status"].get("allocatable", {}).items()
        if resource.startswith("nvidia.com/") and count != "0"
    }
    return classes, frozenset(advertised)


def priority_class(plane: ControlPlane, name: str, value: int, preemption: str | None = None) -> None:
    body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
    body["value"] = value
    if preemption:
        body["preemptionPolicy"] = preemption
    plane.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)


async def test_reader_lists_every_page_and_keeps_only_what_it_needs(cluster: Cluster) -> None:
    plane = cluster.plane
    # the recorded cluster: its PriorityClasses (the system ones exist already) and nodes, as registered
    for item in json.loads((RECORDED / "priorityclasses.json").read_text())["items"]:
        if not item["metadata"]["name"].startswith("system-"):
            priority_class(plane, item["metadata"]["name"], item["value"], item.get("preemptionPolicy"))
    for item in json.loads(recorded_text(RECORDED / "nodes.json"))["items"]:
        plane.node(item["metadata"]["name"], item["status"]["allocatable"], item["metadata"].get("labels"))
    plane.node("recorded-cpu", {"cpu": "8", "memory": "32Gi", "nvidia.com/mig-7g.40gb": "0"})
    api = api_client(cluster.webhook)
    cache = ClusterFactsCache(KubeClusterReader(api, page_size=1))  # a page per object
    assert await cache.refresh()
    api.close()
    classes = cache.facts.priority_classes
    assert classes is not None
    assert classes["gpu-batch-low"] == PriorityClassInfo(-10, "Never")
    assert classes["gpu-inference-high"] == PriorityClassInfo(100000, "PreemptLowerPriority")
    advertised = cache.facts.advertised_resources
    assert advertised is not None
    assert {
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
    } <= advertised
    assert "nvidia.com/mig-7g.40gb" not in advertised  # a count of zero is not on offer
    # every page followed: what was read is all the API holds
    assert (classes, advertised) == api_facts(plane)


async def test_cluster_facts_follow_the_api_after_changes(cluster: Cluster) -> None:
    plane = cluster.plane
    priority_class(plane, "gpu-train-mid", 1000)
    gpu_node(plane, "facts-a30", {"nvidia.com/mig-2g.12gb": "8"})
    # without the memory of resources gone (`cluster.rememberSeconds: 0`), the facts are exactly the API's
    api = api_client(cluster.webhook)
    cache = ClusterFactsCache(KubeClusterReader(api), remember_seconds=lambda: 0.0)
    assert await cache.refresh()
    assert cache.facts.priority_classes is not None and cache.facts.advertised_resources is not None
    assert cache.facts.priority_classes["gpu-train-mid"].value == 1000
    assert "nvidia.com/mig-4g.20gb" not in cache.facts.advertised_resources
    # A PriorityClass's value cannot be updated (the API server says it is immutable): it changes by being
    # deleted and created again.
    path = "/apis/scheduling.k8s.io/v1/priorityclasses/gpu-train-mid"
    current = plane.request("GET", path)
    with pytest.raises(urllib.error.HTTPError) as refused:
        plane.request("PUT", path, {**current, "value": 2000})
    assert refused.value.code == 422
    refused.value.close()  # the error holds the answer's socket
    delete(plane, path)
    priority_class(plane, "gpu-train-mid", 2000, "Never")
    gpu_node(plane, "facts-a100", {"nvidia.com/mig-4g.20gb": "2", "nvidia.com/mig-3g.20gb": "2"})
    delete(plane, "/api/v1/nodes/facts-a30")
    assert await cache.refresh()
    assert cache.facts.priority_classes is not None and cache.facts.advertised_resources is not None
    assert cache.facts.priority_classes["gpu-train-mid"] == PriorityClassInfo(2000, "Never")
    assert "nvidia.com/mig-4g.20gb" in cache.facts.advertised_resources
    assert "nvidia.com/mig-2g.12gb" not in cache.facts.advertised_resources
    assert (cache.facts.priority_classes, cache.facts.advertised_resources) == api_facts(plane)
    api.close()


async def test_a_gpu_pool_scaled_to_zero_still_offers_what_its_nodes_advertised(cluster: Cluster) -> None:
    # An autoscaler removes the last node of a pool when its pods are gone; the next pod must still be sized for
    # that pool's MIG profiles, or it asks for a resource no node will ever have.
    plane = cluster.plane
    gpu_node(plane, "facts-pool-1", {"nvidia.com/mig-1g.12gb": "4"})
    api = api_client(cluster.webhook)
    cache = ClusterFactsCache(KubeClusterReader(api))
    assert await cache.refresh()
    delete(plane, "/api/v1/nodes/facts-pool-1")
    assert await cache.refresh()
    api.close()
    assert cache.facts.advertised_resources is not None
    assert "nvidia.com/mig-1g.12gb" in cache.facts.advertised_resources
    assert "nvidia.com/mig-1g.12gb" not in (api_facts(plane)[1] or frozenset())


async def test_a_pool_karpenter_starts_at_zero_offers_what_its_node_overlay_says(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # Without Karpenter (no NodeOverlay CRD) the read works, offers what the nodes advertise and logs nothing; with
    # the shipped example overlay (and the shipped RBAC), it also offers the overlay's MIG resources, which size an
    # 8Gi pod to 2g.10gb, the all-balanced pool's (docs/admins/karpenter.md). Other tests of the module leave
    # nodes with MIG resources: the expectation is the API's nodes read just before, plus the overlay's.
    plane = cluster.plane
    api = api_client(cluster.webhook)
    cache = ClusterFactsCache(KubeClusterReader(api))
    (overlay,) = yaml.safe_load_all((ROOT / "examples" / "gpu-stack" / "karpenter-nodeoverlay.yaml").read_text())
    with caplog.at_level(logging.WARNING):
        assert await cache.refresh()
    assert cache.facts.advertised_resources == (api_facts(plane)[1] or None)
    assert not [r for r in caplog.records if "NodeOverlay" in r.getMessage()]
    plane.kubectl("apply", "--server-side", "-f", str(tools().files["karpenter-crd-nodeoverlays"]))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/nodeoverlays.karpenter.sh")
    plane.apply([overlay])
    try:
        assert await cache.refresh()
        assert cache.facts.advertised_resources == api_facts(plane)[1] | set(overlay["spec"]["capacity"])
        stored = plane.get(f"/apis/karpenter.sh/v1alpha1/nodeoverlays/{overlay['metadata']['name']}")
        offered = facts(None, offered_by_node_overlays([stored]))
        pod = admitted_pod("chat-0", {"gpupack.io/workload": "inference", "gpupack.io/gpu-memory": "8Gi"})
        context = MutationContext(policy=parse_policy(b""), version="t", facts=offered)
        limits = apply_patch(pod, plan(pod, "ml", context).ops)["spec"]["containers"][0]["resources"]["limits"]
        assert "nvidia.com/mig-2g.10gb" in limits
    finally:
        api.close()
        plane.kubectl("delete", "--ignore-not-found", "nodeoverlays.karpenter.sh", "--all")


# the webhook's Lease reader ---------------------------------------------------------------------------------------


def lease_path(namespace: str = NS, name: str = "gpupack-scheduler") -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def serve_lease(plane: ControlPlane, body: dict[str, Any] | None, namespace: str = NS) -> None:
    """Make the Lease what `body` says (an update of the one there, as a renewal is; created when missing), or
    delete it (None)."""
    name = "gpupack-scheduler" if body is None else body["metadata"]["name"]
    current = plane.get(lease_path(namespace, name))
    if body is None:
        if current is not None:
            delete(plane, lease_path(namespace, name))
    elif current is None:
        plane.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body)
    else:
        metadata = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        plane.request("PUT", lease_path(namespace, name), {**body, "metadata": metadata})


def renewed(seconds_ago: float, **kw: Any) -> dict[str, Any]:
    return leader_lease(*KEY, NOW - seconds_ago, **kw)


def cache_for(kubeconfig: Path, registry: CollectorRegistry | None = None) -> LeaseCache:
    metrics = LeaseMetrics(registry) if registry is not None else None
    return LeaseCache(KubeLeaseReader(api_client(kubeconfig)), metrics, clock=lambda: NOW)


def account(plane: ControlPlane, name: str) -> Path:
    """A kubeconfig of a ServiceAccount in gpupack-system that nothing is bound to yet."""
    plane.service_account(NS, name)
    return plane.service_account_kubeconfig(NS, name)


@pytest.mark.parametrize(
    ("served", "live", "reason"),
    [
        (renewed(1), True, None),
        (renewed(60), False, "expired"),
        (None, False, "missing"),
        (renewed(1, holder=""), False, "no-holder"),
    ],
)
async def test_one_read_gives_the_verdict(cluster: Cluster, served: Any, live: bool, reason: str | None) -> None:
    # With the shipped Role (`get` on this one Lease and nothing else), so the read is one GET by name.
    serve_lease(cluster.plane, served)
    cache = cache_for(cluster.webhook)
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (live, reason)
    assert cache.status(DEFAULTS, NOW) == status


async def test_a_forbidden_read_is_unreadable_and_logged_once_without_a_traceback(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    serve_lease(cluster.plane, renewed(1))
    registry = CollectorRegistry()
    cache = cache_for(account(cluster.plane, "without-the-lease-role"), registry)
    with caplog.at_level(logging.INFO, "gpupack.core.lease_cache"):
        status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason, status.detail) == (
        False,
        "unreadable",
        "lease unreadable: HTTP 403",
    )
    lines = [r for r in caplog.records if r.name == "gpupack.core.lease_cache"]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]  # the failed read, the verdict
    assert lines[0].getMessage() == "cannot read lease gpupack-system/gpupack-scheduler: HTTP 403"
    assert "no live leader (lease gpupack-system/gpupack-scheduler: unreadable: HTTP 403)" in lines[1].getMessage()
    assert all(r.exc_info is None for r in lines)
    assert registry.get_sample_value("gpupack_scheduler_lease_read_failures_total") == 1.0
    assert registry.get_sample_value(*LIVE_GAUGE) == 0.0


async def test_a_failed_read_after_a_good_one_keeps_the_hold_until_it_expires(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    plane = cluster.plane
    serve_lease(plane, renewed(1))
    kubeconfig = account(plane, "lease-reader-revoked")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "lease-reader-revoked", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpupack-webhook-scheduler-lease"},
        "subjects": [{"kind": "ServiceAccount", "name": "lease-reader-revoked", "namespace": NS}],
    }
    plane.apply([binding])
    wait_until(lambda: can(plane, kubeconfig, "get", "leases/gpupack-scheduler", "-n", NS), 30, "the binding")
    cache = cache_for(kubeconfig)
    first = await cache.refresh(DEFAULTS)
    assert first is not None and first.live
    delete(plane, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings/lease-reader-revoked")
    wait_until(lambda: not can(plane, kubeconfig, "get", "leases/gpupack-scheduler", "-n", NS), 30, "revoked")
    caplog.clear()
    with caplog.at_level(logging.WARNING, "gpupack.core.lease_cache"):
        status = await cache.refresh(DEFAULTS)
    assert status is not None and status.live  # one failed read changes nothing
    assert [r.getMessage() for r in caplog.records if r.name == "gpupack.core.lease_cache"] == [
        "cannot read lease gpupack-system/gpupack-scheduler: HTTP 403; keeping the last renewal seen until it expires"
    ]
    # renewed 1 s before NOW, held 15 s, 10 s of grace: live up to NOW + 24, then unreadable (not "expired")
    assert cache.status(DEFAULTS, NOW + 24).live
    late = cache.status(DEFAULTS, NOW + 24.5)
    assert (late.live, late.reason) == (False, "unreadable")


async def test_a_lease_deleted_after_a_good_read_is_missing_at_once_and_live_again_once_recreated(
    cluster: Cluster,
) -> None:
    plane = cluster.plane
    serve_lease(plane, renewed(1))
    cache = cache_for(cluster.webhook)
    await cache.refresh(DEFAULTS)
    serve_lease(plane, None)
    status = await cache.refresh(DEFAULTS)
    assert status is not None and (status.live, status.reason) == (False, "missing")
    serve_lease(plane, renewed(0, holder="gpupack-scheduler-new"))  # a new leader's Lease
    status = await cache.refresh(DEFAULTS)
    assert status is not None and status.live
    assert cache.observation is not None and cache.observation.held is not None
    assert cache.observation.held.holder == "gpupack-scheduler-new"


async def test_each_change_of_verdict_is_logged_once_and_the_gauge_follows(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    cache = cache_for(cluster.webhook, registry)
    said: list[tuple[int, str]] = []
    for served, gauge in [
        (renewed(1), 1.0),
        (renewed(2), 1.0),
        (renewed(90), 0.0),
        (renewed(95), 0.0),
        (renewed(0), 1.0),
    ]:
        serve_lease(cluster.plane, served)  # each one an update of the Lease, as a renewal is
        caplog.clear()
        with caplog.at_level(logging.INFO, "gpupack.core.lease_cache"):
            await cache.refresh(DEFAULTS)
        said += [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "gpupack.core.lease_cache"]
        assert registry.get_sample_value(*LIVE_GAUGE) == gauge
    assert said == [
        (
            logging.INFO,
            f"gpupack-scheduler is live: lease gpupack-system/gpupack-scheduler held by {LEADER}; "
            "GPU pods are sent to it",
        ),
        (
            logging.WARNING,
            "gpupack-scheduler has no live leader (lease gpupack-system/gpupack-scheduler: expired 75s ago): "
            "GPU pods stay on default-scheduler, not packed",
        ),
        (
            logging.INFO,
            f"gpupack-scheduler is live: lease gpupack-system/gpupack-scheduler held by {LEADER}; "
            "GPU pods are sent to it",
        ),
    ]


class CountingReader:
    """The webhook's KubeLeaseReader, counting its reads."""

    def __init__(self, inner: KubeLeaseReader) -> None:
        self.inner = inner
        self.reads: list[tuple[str, str]] = []

    def read(self, namespace: str, name: str) -> Any:
        self.reads.append((namespace, name))
        return self.inner.read(namespace, name)


async def test_with_routing_off_nothing_is_read_and_no_gauge_is_exported(cluster: Cluster) -> None:
    serve_lease(cluster.plane, renewed(1))
    registry = CollectorRegistry()
    reader = CountingReader(KubeLeaseReader(api_client(cluster.webhook)))
    cache = LeaseCache(reader, LeaseMetrics(registry), clock=lambda: NOW)
    await cache.refresh(DEFAULTS)
    assert registry.get_sample_value(*LIVE_GAUGE) == 1.0
    off = parse_policy(b"scheduler: {name: null}").scheduler
    assert await cache.refresh(off) is None
    assert reader.reads == [KEY] and registry.get_sample_value(*LIVE_GAUGE) is None


async def test_a_policy_naming_another_lease_is_not_judged_by_the_old_one(cluster: Cluster) -> None:
    plane = cluster.plane
    # Naming another Lease takes a Role for it (the shipped one names gpupack-scheduler's): as an admin would.
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "gpupack-webhook-gpu-scheduler-lease", "namespace": "kube-system"},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["gpu-scheduler"],
                "verbs": ["get"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gpupack-webhook-gpu-scheduler-lease", "namespace": "kube-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "gpupack-webhook", "namespace": NS}],
    }
    plane.apply([role, binding])
    wait_until(lambda: can(plane, cluster.webhook, "get", "leases/gpu-scheduler", "-n", "kube-system"), 30, "Role")
    serve_lease(plane, renewed(1))
    serve_lease(plane, leader_lease("kube-system", "gpu-scheduler", NOW - 1), "kube-system")
    cache = cache_for(cluster.webhook)
    await cache.refresh(DEFAULTS)
    other = SchedulerPolicy.model_validate(
        {"name": "gpu-scheduler", "lease": {"namespace": "kube-system", "name": "gpu-scheduler"}}
    )
    assert cache.status(other, NOW).reason == "not-read-yet"
    serve_lease(plane, None)  # gone: had the cache read the old Lease again, it would be "missing"
    await cache.refresh(other)
    assert cache.status(other, NOW).live
