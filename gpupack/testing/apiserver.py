"""A fake kube-apiserver at the HTTP level, for the real kubernetes client: PriorityClasses and nodes (paginated,
one item per page) and Leases by name, with the Status bodies a real API server answers errors with. It stays for
the faults a real API server cannot be made to produce on demand (a 503 mid-list, a Lease body that is not JSON)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gpupack.testing.net import write_kubeconfig

__all__ = ["FakeApiServer", "status_body", "write_kubeconfig"]

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


def status_body(
    code: int, reason: str, message: str, name: str, group: str = "coordination.k8s.io", kind: str = "leases"
) -> dict[str, Any]:
    """A metav1.Status as kube-apiserver sends it with an error code (no `group` in its details for the core
    group's resources)."""
    details = {"name": name, **({"group": group} if group else {}), "kind": kind}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


class FakeApiServer:
    """Serves `/apis/scheduling.k8s.io/v1/priorityclasses`, `/api/v1/nodes` and `GET` of one Lease."""

    def __init__(self, priority_classes: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        self.priority_classes = priority_classes
        self.nodes = nodes
        self.failing = False
        self.leases: dict[tuple[str, str], Any] = {}
        """Lease bodies by (namespace, name); a missing key answers 404."""
        self.lease_forbidden = False
        """Answer Lease reads 403, as for a ServiceAccount without the Role."""
        self.requests: list[str] = []

    def _page(self, request: web.Request, items: list[dict[str, Any]], kind: str) -> web.Response:
        self.requests.append(request.path_qs)
        if self.failing:
            return web.json_response({"kind": "Status", "code": 503, "message": "unavailable"}, status=503)
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(items))
        limit = min(limit, 1)  # force pagination
        nxt = start + limit
        meta = {"resourceVersion": "100", **({"continue": str(nxt)} if nxt < len(items) else {})}
        return web.json_response({"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items[start:nxt]})

    async def list_priority_classes(self, request: web.Request) -> web.Response:
        return self._page(request, self.priority_classes, "PriorityClassList")

    async def list_nodes(self, request: web.Request) -> web.Response:
        return self._page(request, self.nodes, "NodeList")

    async def get_lease(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        if self.lease_forbidden:
            message = (
                f'leases.coordination.k8s.io "{name}" is forbidden: User '
                '"system:serviceaccount:gpupack-system:gpupack-webhook" cannot get resource "leases" in API group '
                f'"coordination.k8s.io" in the namespace "{namespace}"'
            )
            return web.json_response(status_body(403, "Forbidden", message, name), status=403)
        lease = self.leases.get((namespace, name))
        if lease is None:
            message = f'leases.coordination.k8s.io "{name}" not found'
            return web.json_response(status_body(404, "NotFound", message, name), status=404)
        if isinstance(lease, bytes):
            return web.Response(body=lease, content_type="application/json")
        return web.json_response(lease)

    def lease_reads(self) -> int:
        """How many Lease GETs were received."""
        return sum("/leases/" in r for r in self.requests)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/apis/scheduling.k8s.io/v1/priorityclasses", self.list_priority_classes)
        app.router.add_get("/api/v1/nodes", self.list_nodes)
        app.router.add_get(LEASE_PATH, self.get_lease)
        return app
