"""A minimal Kubernetes API for the benchmark: `python -m bench.extender.apiserver PORT NODES.json PODS.json`.

Serves `GET /api/v1/nodes` and `GET /api/v1/pods` as paginated lists (`limit`, `continue`), the way the
extender's informer reads them in production, and watches that stay open without events until their
`timeoutSeconds`. It runs in its own process, so the memory of the whole pod list is not the extender's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
from aiohttp import web

VERSION = "1000"


def make_app(lists: dict[str, list[bytes]]) -> web.Application:
    """Lists pre-serialised item by item, so a page costs a join."""

    async def handle(request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        items = lists[kind]
        if request.query.get("watch") in ("1", "true"):
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await asyncio.sleep(float(request.query.get("timeoutSeconds", "300")))
            return response
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(items))
        end = min(start + limit, len(items))
        meta = {"resourceVersion": VERSION}
        if end < len(items):
            meta["continue"] = str(end)
        head = orjson.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta})[:-1]
        body = head + b',"items":[' + b",".join(items[start:end]) + b"]}"
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/{kind:nodes|pods}", handle)
    return app


def main() -> None:
    port, nodes, pods = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    lists = {
        kind: [orjson.dumps(item) for item in orjson.loads(path.read_bytes())["items"]]
        for kind, path in (("nodes", nodes), ("pods", pods))
    }
    web.run_app(make_app(lists), host="127.0.0.1", port=port, print=None, access_log=None, shutdown_timeout=0.5)


if __name__ == "__main__":
    main()
