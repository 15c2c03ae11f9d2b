"""The API the webhook reads, for its benchmark: `python -m bench.webhook.apiserver PORT`.

Serves the shipped PriorityClasses (`manifests/priorityclasses.yaml`), the recorded cluster's nodes (which MIG
profiles exist) and the gpupack scheduler's leader Lease, renewed at every read, so the benchmark measures the
path a deployed webhook takes: priorities from the API and pods routed to gpupack-scheduler. It runs in its own
process, off the webhook's CPU.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

from aiohttp import web

from bench.webhook import recorded


def _list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}


def make_app() -> web.Application:
    """The three reads of a deployed webhook."""
    classes, nodes = recorded.priority_classes(), recorded.nodes()

    async def priority_classes(_request: web.Request) -> web.Response:
        return web.json_response(_list("PriorityClassList", classes))

    async def node_list(_request: web.Request) -> web.Response:
        return web.json_response(_list("NodeList", nodes))

    async def lease(request: web.Request) -> web.Response:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": "gpupack-scheduler-0", "leaseDurationSeconds": 15, "renewTime": now}
        return web.json_response({"kind": "Lease", "metadata": dict(request.match_info), "spec": spec})

    app = web.Application()
    app.router.add_get("/apis/scheduling.k8s.io/v1/priorityclasses", priority_classes)
    app.router.add_get("/api/v1/nodes", node_list)
    app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", lease)
    return app


if __name__ == "__main__":
    web.run_app(make_app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
