"""The only module that talks to the Kubernetes API client: reads PriorityClasses and node GPU resources, the
gpupack scheduler's leader Lease, and lists and watches nodes and pods for the extender's cache.

Lists and watches are read raw (`_preload_content=False`) and parsed with orjson into plain dicts, instead of
building the client's generated model objects for every node and pod. A background task refreshes the snapshot;
request handlers only read the last one, so an unreachable API never slows admission down.

Exceptions raised by `RawListWatch`:

    WatchError            an ERROR event other than 410 in a watch stream
    ResourceExpired       410 Gone: the resourceVersion (or continue token) is too old; list again
    (kubernetes ApiException and urllib3 errors pass through: transient, retry with back-off)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import orjson
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpupack.core import contract
from gpupack.core.cluster import UNKNOWN, ClusterFacts, PriorityClassInfo, facts, remembered
from gpupack.core.dra import DEVICE_CLASSES, RESOURCE_SLICES, gpus_by_node
from gpupack.core.lease import LeaseUnreadable
from gpupack.core.telemetry import ClusterReadMetrics

log = logging.getLogger(__name__)

PAGE_SIZE = 500
REQUEST_TIMEOUT = 10.0


def priority_classes_from(items: Iterable[dict[str, Any]]) -> dict[str, PriorityClassInfo]:
    """PriorityClass objects (as JSON) to name -> value and preemption policy."""
    out: dict[str, PriorityClassInfo] = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name")
        value = item.get("value")
        if isinstance(name, str) and isinstance(value, int):
            out[name] = PriorityClassInfo(value, item.get("preemptionPolicy") or "PreemptLowerPriority")
    return out


def _nvidia_resources(resources: dict[Any, Any]) -> set[str]:
    """The NVIDIA extended resources of a resource list with a count above zero."""
    return {
        key
        for key, value in resources.items()
        if isinstance(key, str) and key.startswith(contract.NVIDIA_RESOURCE_PREFIX) and str(value) not in ("0", "")
    }


def advertised_from(nodes: Iterable[dict[str, Any]]) -> frozenset[str]:
    """NVIDIA extended resources that at least one node has in its allocatable with a count above zero."""
    found: set[str] = set()
    for node in nodes:
        found |= _nvidia_resources((node.get("status") or {}).get("allocatable") or {})
    return frozenset(found)


NODE_OVERLAYS: Final = ("karpenter.sh", "v1alpha1", "nodeoverlays")
"""Karpenter's NodeOverlays (group, version, plural): the extended resources it adds to the instance types it may
buy (docs/admins/karpenter.md)."""


def offered_by_node_overlays(overlays: Iterable[Any]) -> frozenset[str]:
    """NVIDIA extended resources that some NodeOverlay adds to instance types (`spec.capacity`, a count above
    zero). Karpenter starts a pool at zero nodes and buys a node for a pod sized to a MIG slice only when an
    overlay says the instance type has it; what Karpenter may buy is offered as surely as what a node advertises.
    An overlay without a readable `spec.capacity` offers nothing (logged)."""
    found: set[str] = set()
    for overlay in overlays:
        spec = overlay.get("spec") if isinstance(overlay, dict) else None
        capacity = spec.get("capacity") if isinstance(spec, dict) else None
        if capacity is None:
            continue
        if not isinstance(capacity, dict):
            name = ((overlay.get("metadata") or {}).get("name") or "?") if isinstance(overlay, dict) else "?"
            log.warning("NodeOverlay %s: spec.capacity is not a mapping, ignored", name)
            continue
        found |= _nvidia_resources(capacity)
    return frozenset(found)


def offered_by_device_classes(classes: Iterable[Any], slices: Iterable[Any]) -> frozenset[str]:
    """NVIDIA extended resources that kube-scheduler can satisfy from DRA devices (`DRAExtendedResource`): those a
    DeviceClass names in `spec.extendedResourceName` and that some published device of NVIDIA's driver amounts
    to (`gpupack.core.dra`: a whole GPU is `nvidia.com/gpu`, a MIG device `nvidia.com/mig-<profile>`). The class's
    CEL selector is taken to pick those devices, as the driver's own classes and gpupack's per-profile ones do.
    Malformed classes and slices offer nothing (logged)."""
    named: set[str] = set()
    for device_class in classes:
        spec = device_class.get("spec") if isinstance(device_class, dict) else None
        name = spec.get("extendedResourceName") if isinstance(spec, dict) else None
        if isinstance(name, str) and name.startswith(contract.NVIDIA_RESOURCE_PREFIX):
            named.add(name)
    if not named:
        return frozenset()
    published = {device.resource for gpus in gpus_by_node(slices).values() for device in gpus.devices}
    return frozenset(named & published)


def facts_from_lists(priority_class_list: dict[str, Any] | None, node_list: dict[str, Any] | None) -> ClusterFacts:
    """Facts from `kubectl get priorityclasses,nodes -o json`-style lists; a None list stays unknown."""
    classes = priority_classes_from(priority_class_list.get("items") or []) if priority_class_list else None
    advertised = advertised_from(node_list.get("items") or []) if node_list else None
    return facts(classes, advertised, time.time())


class ClusterReader(Protocol):
    """Reads a fresh snapshot; blocking (run in a thread); raises on any failure."""

    def read(self) -> ClusterFacts: ...


def api_client(kubeconfig: Path | None = None, in_cluster: bool = False) -> client.ApiClient:
    """An API client from a kubeconfig file or the pod's service account. Raises ValueError naming the kubeconfig
    (or the service account) when it cannot be read: a missing file, not YAML, no current context."""
    configuration = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            path = str(kubeconfig) if kubeconfig else None
            config.load_kube_config(config_file=path, client_configuration=configuration)
    except (config.ConfigException, yaml.YAMLError, OSError, TypeError, KeyError) as exc:
        where = "the pod's service account" if in_cluster else f"kubeconfig {kubeconfig or '~/.kube/config'}"
        raise ValueError(f"{where}: {' '.join(str(exc).split()) or type(exc).__name__}") from exc
    return client.ApiClient(configuration)


def list_pages(
    call: Callable[..., Any], page_size: int = PAGE_SIZE, request_timeout: float = REQUEST_TIMEOUT
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """The pages of a list call as (items, resourceVersion of the list), following `continue` tokens."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False, "_request_timeout": request_timeout}
        if token:
            kwargs["_continue"] = token
        response = call(**kwargs)
        try:
            body = orjson.loads(response.data)
        except BaseException:
            # a connection broken mid-body: close it rather than leave its socket to the garbage collector
            with suppress(Exception):
                response.close()
            raise
        finally:
            with suppress(Exception):
                response.release_conn()
        meta = body.get("metadata") or {}
        yield body.get("items") or [], str(meta.get("resourceVersion") or "")
        token = meta.get("continue")
        if not token:
            return


class KubeClusterReader:
    """Lists PriorityClasses, nodes, Karpenter's NodeOverlays, DeviceClasses and ResourceSlices (paginated,
    `page_size` objects a request) through the kubernetes client."""

    def __init__(self, api: client.ApiClient, page_size: int = PAGE_SIZE) -> None:
        self._scheduling = client.SchedulingV1Api(api)
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._page_size = page_size
        self._unread: dict[str, int] = {}
        """Per optional kind (plural), the status of its last list that failed (logged once per status)."""

    def _pages(self, call: Callable[..., Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page, _ in list_pages(call, self._page_size):
            items += page
        return items

    def read(self) -> ClusterFacts:
        """One consistent-enough snapshot (two lists, each paginated)."""
        classes = priority_classes_from(self._pages(self._scheduling.list_priority_class))
        advertised = (
            advertised_from(self._pages(self._core.list_node)) | self._overlay_resources() | self._dra_resources()
        )
        return facts(classes, advertised, time.time())

    def _optional(self, what: str, kind: tuple[str, str, str]) -> list[dict[str, Any]] | None:
        """Every object of a cluster-scoped kind that may be absent: None where it is not served (404) or gpupack
        may not read it (403, an older chart's RBAC; logged once per kind and status)."""
        group, version, plural = kind
        try:
            items = self._pages(partial(self._custom.list_cluster_custom_object, group, version, plural))
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            if exc.status == 403 and self._unread.get(plural) != exc.status:
                log.warning("cannot list %s (403): sizing ignores what they offer", what)
            self._unread[plural] = exc.status
            return None
        self._unread.pop(plural, None)
        return items

    def _overlay_resources(self) -> frozenset[str]:
        """What Karpenter's NodeOverlays offer; nothing where Karpenter is not installed."""
        overlays = self._optional("Karpenter's NodeOverlays", NODE_OVERLAYS)
        return offered_by_node_overlays(overlays or [])

    def _dra_resources(self) -> frozenset[str]:
        """What DRA devices offer as extended resources; nothing without DeviceClasses that name one."""
        classes = self._optional("DeviceClasses", DEVICE_CLASSES)
        if not classes:
            return frozenset()
        return offered_by_device_classes(classes, self._optional("ResourceSlices", RESOURCE_SLICES) or [])


class ClusterFactsCache:
    """The last snapshot read, refreshed in the background; UNKNOWN until the first successful read."""

    def __init__(
        self,
        reader: ClusterReader | None,
        metrics: ClusterReadMetrics | None = None,
        remember_seconds: Callable[[], float] = lambda: 7 * 86400.0,
    ) -> None:
        self.reader = reader
        self.facts: ClusterFacts = UNKNOWN
        self._metrics = metrics
        self._remember_seconds = remember_seconds
        self._seen: dict[str, float] = {}
        """When each GPU resource was last advertised (`gpupack.core.cluster.remembered`)."""

    async def refresh(self) -> bool:
        """Read once; on failure keep the last snapshot (the API's last word beats the policy's guess). The GPU
        resources are those some node advertises now or did within `remember_seconds` (None while none ever
        did: the policy's profiles stand)."""
        if self.reader is None:
            return False
        try:
            read = await asyncio.to_thread(self.reader.read)
            if read.advertised_resources is not None:
                now = read.read_at or time.time()
                self._seen = remembered(self._seen, read.advertised_resources, now, self._remember_seconds())
                read = facts(read.priority_classes, frozenset(self._seen) or None, read.read_at)
            self.facts = read
        except Exception as exc:
            log.warning("cannot read PriorityClasses and nodes from the API, keeping the last snapshot: %s", exc)
            if self._metrics is not None:
                self._metrics.failures.inc()
            return False
        if self._metrics is not None:
            self._metrics.last_success.set(self.facts.read_at or time.time())
        return True

    async def run(self, interval: Callable[[], float]) -> None:
        """Refresh every `interval()` seconds until cancelled."""
        if self.reader is None:
            return
        while True:
            await self.refresh()
            await asyncio.sleep(interval())


CLUSTER_LISTS: Final[tuple[tuple[str, str, str], ...]] = (
    ("Node", "", "nodes"),
    ("Pod", "", "pods"),
    ("PodDisruptionBudget", "policy", "poddisruptionbudgets"),
    ("DaemonSet", "apps", "daemonsets"),
    ("Event", "", "events"),
)
"""What `gpupack report` lists, in all namespaces, as (kind, API group, resource): its RBAC is `list` on each of
these resources in a ClusterRole bound by a ClusterRoleBinding, and nothing else."""
DRA_CLUSTER_LISTS: Final[tuple[tuple[str, str, str], ...]] = (
    ("ResourceSlice", "resource.k8s.io", "resourceslices"),
    ("ResourceClaim", "resource.k8s.io", "resourceclaims"),
)
"""What `gpupack report` lists too where the cluster serves it: the GPUs a DRA driver publishes and the claims
holding them. A 404 (no `resource.k8s.io/v1`) or 403 (a ClusterRole without them) leaves them out, logged."""
EVENT_REASONS: Final = ("Preempted", "DisruptionBlocked", "Unconsolidatable")
"""The Events the report lists: those kube-scheduler writes on each pod it preempts, and those Karpenter writes on a
node it may not or cannot disrupt. The API server filters core/v1 Events by `reason` (one value per list: a field
selector ANDs its terms), so a busy cluster's other Events never leave it."""


def resource_name(group: str, resource: str) -> str:
    """`poddisruptionbudgets.policy`, `nodes`: a resource as RBAC and `kubectl auth can-i` name it."""
    return f"{resource}.{group}" if group else resource


class KubeClusterObjects:
    """Lists what `gpupack report` judges (`CLUSTER_LISTS`: nodes, pods, PodDisruptionBudgets, DaemonSets and the
    Events of `EVENT_REASONS`, all namespaces), paginated and raw, each item given its kind (list items carry
    none)."""

    def __init__(self, api: client.ApiClient) -> None:
        core, policy, apps = client.CoreV1Api(api), client.PolicyV1Api(api), client.AppsV1Api(api)
        calls: dict[str, Callable[..., Any]] = {
            "Node": core.list_node,
            "Pod": core.list_pod_for_all_namespaces,
            "PodDisruptionBudget": policy.list_pod_disruption_budget_for_all_namespaces,
            "DaemonSet": apps.list_daemon_set_for_all_namespaces,
        }
        self._calls = [
            (kind, resource_name(group, resource), calls[kind])
            for kind, group, resource in CLUSTER_LISTS
            if kind != "Event"
        ]
        self._calls += [
            ("Event", "events", partial(core.list_event_for_all_namespaces, field_selector=f"reason={reason}"))
            for reason in EVENT_REASONS
        ]
        dra = client.ResourceV1Api(api)
        self._optional: list[tuple[str, str, Callable[..., Any]]] = [
            ("ResourceSlice", "resourceslices.resource.k8s.io", dra.list_resource_slice),
            ("ResourceClaim", "resourceclaims.resource.k8s.io", dra.list_resource_claim_for_all_namespaces),
        ]
        self._without = {
            "ResourceSlice": "the report counts device-plugin GPUs only",
            "ResourceClaim": "pods holding a DRA device through their own claim show no GPU of it",
        }
        """What the report misses without each optional list, for the warning."""

    def read(self) -> list[dict[str, Any]]:
        """Every object of the five kinds. Raises `KubeCallFailed` naming the list that failed (`LIST
        poddisruptionbudgets.policy`) with the API server's status and message, or "no answer"."""
        objects: list[dict[str, Any]] = []
        for kind, resource, call in [*self._calls, *self._optional]:
            try:
                for page, _ in list_pages(call):
                    objects += [{**item, "kind": kind} for item in page if isinstance(item, dict)]
            except ApiException as exc:
                if (kind, resource, call) in self._optional and exc.status in (403, 404):
                    log.warning("cannot list %s (%s): %s", resource, exc.status, self._without[kind])
                    continue
                raise _call_failed(f"LIST {resource}", exc) from exc
            except Exception as exc:
                raise _call_failed(f"LIST {resource}", exc) from exc
        return objects


LEASE_TIMEOUT = 5.0
"""Seconds one read of the Lease may take: a hung read delays the next one, and the last one ages meanwhile."""


def _unreadable(exc: Exception) -> LeaseUnreadable:
    """A short reason for a failed read (it ends up in pods' warnings): `HTTP 403`, `Connection refused`, `timed
    out`, not urllib3's whole chain with host, port and retry counts."""
    if isinstance(exc, ApiException):
        return LeaseUnreadable(f"HTTP {exc.status}")
    reason = getattr(exc, "reason", None)  # urllib3's MaxRetryError wraps the error that ended the retries
    cause: BaseException = reason if isinstance(reason, Exception) else exc
    while cause.__cause__ is not None:  # down to the socket's own error
        cause = cause.__cause__
    text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    return LeaseUnreadable(text[:100] or type(cause).__name__)


class KubeLeaseReader:
    """GETs one Lease by name (`get` on that Lease is all the RBAC it needs), as raw JSON like the lists above."""

    def __init__(self, api: client.ApiClient, request_timeout: float = LEASE_TIMEOUT) -> None:
        self._coordination = client.CoordinationV1Api(api)
        self._request_timeout = request_timeout

    def read(self, namespace: str, name: str) -> Any:
        """The Lease's JSON, or None when it does not exist (HTTP 404). Raises LeaseUnreadable otherwise."""
        try:
            # raw: with _preload_content=False the client returns the HTTP response, not a V1Lease
            response: Any = self._coordination.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=self._request_timeout
            )
            return orjson.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _unreadable(exc) from exc
        except orjson.JSONDecodeError as exc:
            raise LeaseUnreadable("the API server's answer is not JSON") from exc
        except Exception as exc:  # urllib3: refused, reset, timed out, TLS
            raise _unreadable(exc) from exc


# list + watch ------------------------------------------------------------------------------------------------

Kind = Literal["nodes", "pods", "resourceslices", "resourceclaims"]
"""What the extender lists and watches (all namespaces for pods and claims)."""
OPTIONAL_KINDS: Final[frozenset[str]] = frozenset({"resourceslices", "resourceclaims"})
"""Kinds a cluster may not serve (`resource.k8s.io/v1` is GA from Kubernetes 1.34) or an older chart's RBAC may
not let the extender read: without them the extender places pods on device-plugin nodes alone."""


class WatchError(Exception):
    """An ERROR event in a watch stream (the API server's Status code and message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class NotServed(WatchError):
    """A list or watch of an optional kind refused with 403 or 404: the API is not served or not allowed."""


class ResourceExpired(WatchError):
    """410 Gone: the resourceVersion asked for is older than the API server keeps; the caller must list again."""


def _status_error(status: dict[str, Any]) -> WatchError:
    code = status.get("code")
    code = code if isinstance(code, int) else 0
    message = str(status.get("message") or status.get("reason") or "watch error")
    return ResourceExpired(code, message) if code == 410 else WatchError(code, message)


class RawWatch:
    """One watch request's events as dicts; iterate in one thread, `close()` from any thread to stop it.

    Yields ADDED, MODIFIED, DELETED and BOOKMARK events; an ERROR event raises `ResourceExpired` (410) or
    `WatchError`. A dropped connection raises urllib3's error; the end of the stream (the server's
    `timeoutSeconds`) ends the iteration.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for segment in self._response.stream(amt=None, decode_content=False):
                buffer += segment
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._event(line)
            if buffer.strip() and not self._closed:
                yield self._event(buffer)
        finally:
            self.close()

    @staticmethod
    def _event(line: bytes) -> dict[str, Any]:
        event = orjson.loads(line)
        if not isinstance(event, dict):
            raise WatchError(0, f"watch event is not an object: {line[:200]!r}")
        if event.get("type") == "ERROR":
            raise _status_error(event.get("object") or {})
        return event

    def close(self) -> None:
        """Stop the stream: unblocks a read in progress in another thread, and frees the connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with suppress(Exception):
            self._response.shutdown()
        with suppress(Exception):
            self._response.close()
        with suppress(Exception):
            self._response.release_conn()


def _list_error(kind: Kind, exc: ApiException) -> Exception:
    """What a failed list or watch raises: ResourceExpired on 410, NotServed on 403/404 of an optional kind."""
    if exc.status == 410:
        return ResourceExpired(410, str(exc.reason))
    if exc.status in (403, 404) and kind in OPTIONAL_KINDS:
        return NotServed(int(exc.status), str(exc.reason))
    return exc


class RawListWatch:
    """Lists and watches nodes, pods, ResourceSlices and ResourceClaims as plain dicts through the kubernetes
    client; blocking calls."""

    def __init__(
        self, api: client.ApiClient, page_size: int = PAGE_SIZE, request_timeout: float = REQUEST_TIMEOUT
    ) -> None:
        core = client.CoreV1Api(api)
        resource = client.ResourceV1Api(api)
        self._calls: dict[Kind, Callable[..., Any]] = {
            "nodes": core.list_node,
            "pods": core.list_pod_for_all_namespaces,
            "resourceslices": resource.list_resource_slice,
            "resourceclaims": resource.list_resource_claim_for_all_namespaces,
        }
        self._page_size = page_size
        self._request_timeout = request_timeout

    def pages(self, kind: Kind) -> Iterator[tuple[list[dict[str, Any]], str]]:
        """The list of `kind`, page by page, each with the list's resourceVersion. Raises ResourceExpired when
        a continue token has expired (list again from the start)."""
        try:
            yield from list_pages(self._calls[kind], self._page_size, self._request_timeout)
        except ApiException as exc:
            raise _list_error(kind, exc) from exc

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of `kind` and the resourceVersion to watch from."""
        items: list[dict[str, Any]] = []
        version = ""
        for page, page_version in self.pages(kind):
            items += page
            version = version or page_version
        return items, version

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> RawWatch:
        """Open a watch of `kind` from `resource_version`, with bookmarks; the server ends it after
        `timeout_seconds`. Raises ResourceExpired on HTTP 410."""
        try:
            response = self._calls[kind](
                watch=True,
                resource_version=resource_version or None,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                # no event for longer than the server's own timeout means a dead connection
                _request_timeout=(self._request_timeout, timeout_seconds + self._request_timeout),
            )
        except ApiException as exc:
            raise _list_error(kind, exc) from exc
        return RawWatch(response)


# nodes for `gpupack mig-plan --apply` --------------------------------------------------------------------------

MERGE_PATCH = "application/merge-patch+json"
"""RFC 7386: a `null` value removes a key (a label), which is how the MIG state label is cleared."""


class KubeCallFailed(OSError):
    """A call to the API server failed: `status` is the HTTP status, or None when no answer came (connection
    refused, timed out, TLS); `reason` is the Status message or the socket's error, short enough for a log line.
    An OSError, like any other failed conversation with a server: a command reports it in one line."""

    def __init__(self, call: str, status: int | None, reason: str) -> None:
        super().__init__(f"{call}: {'HTTP ' + str(status) if status else 'no answer'}: {reason}")
        self.call = call
        self.status = status
        self.reason = reason


def _call_failed(call: str, exc: Exception) -> KubeCallFailed:
    if isinstance(exc, ApiException):
        message = str(exc.reason or "")
        with suppress(Exception):
            status = orjson.loads(exc.body or b"")
            message = str(status.get("message") or message)
        return KubeCallFailed(call, int(exc.status) if exc.status else None, message[:300])
    return KubeCallFailed(call, None, str(_unreadable(exc)))


class KubeNodeOps:
    """The few node, pod and event calls `mig-plan --apply` makes, raw JSON in and out; blocking.

    Every method raises `KubeCallFailed` for an error answer or no answer, except `get_node`, which answers
    None for a node that does not exist (HTTP 404): a node deleted while it is being reconfigured is an outcome,
    not an error.
    """

    def __init__(self, api: client.ApiClient, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._core = client.CoreV1Api(api)
        self._dra = client.ResourceV1Api(api)
        self._request_timeout = request_timeout

    def _raw(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            response = call(*args, _preload_content=False, _request_timeout=self._request_timeout, **kwargs)
            return orjson.loads(response.data)
        except Exception as exc:
            raise _call_failed(what, exc) from exc

    def _found(self, what: str, call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        """One object's JSON, or None when the API server answers 404."""
        try:
            found: dict[str, Any] = self._raw(what, call, *args)
        except KubeCallFailed as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def _every(self, what: str, call: Callable[..., Any]) -> list[dict[str, Any]]:
        """Every item of a list call, page by page."""
        try:
            return [item for page, _ in list_pages(call, request_timeout=self._request_timeout) for item in page]
        except Exception as exc:
            raise _call_failed(what, exc) from exc

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The node's JSON, or None when it does not exist."""
        return self._found(f"GET node {name}", self._core.read_node, name)

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every node (paginated)."""
        return self._every("LIST nodes", self._core.list_node)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to `node`, in every namespace (field selector `spec.nodeName`)."""
        selector = f"spec.nodeName={node}"
        return self._every(
            f"LIST pods on {node}",
            lambda **kw: self._core.list_pod_for_all_namespaces(field_selector=selector, **kw),
        )

    def list_pods(self) -> list[dict[str, Any]]:
        """Every pod of every namespace (paginated): what the planner counts as demand."""
        return self._every("LIST pods", self._core.list_pod_for_all_namespaces)

    def list_resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice (paginated): which nodes' GPUs a DRA driver publishes. Empty where the cluster does
        not serve `resource.k8s.io/v1` or the RBAC does not allow it (403, 404; logged)."""
        try:
            return self._every("LIST resourceslices.resource.k8s.io", self._dra.list_resource_slice)
        except KubeCallFailed as exc:
            if exc.status not in (403, 404):
                raise
            log.warning("cannot list resourceslices.resource.k8s.io (%s): DRA nodes are not told apart", exc.status)
            return []

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap's JSON, or None when it does not exist (the MIG manager's layouts live in one)."""
        return self._found(f"GET configmap {namespace}/{name}", self._core.read_namespaced_config_map, name, namespace)

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to the node; its new JSON."""
        node: dict[str, Any] = self._raw(
            f"PATCH node {name}", self._core.patch_node, name, patch, _content_type=MERGE_PATCH
        )
        return node

    def create_event(self, event: dict[str, Any]) -> None:
        """Create a core/v1 Event in the namespace its metadata names."""
        namespace = str((event.get("metadata") or {}).get("namespace") or "default")
        body = client.CoreV1Event.from_dict(event)  # this method's body is typed: a dict is not accepted
        self._raw(f"POST event in {namespace}", self._core.create_namespaced_event, namespace, body)
