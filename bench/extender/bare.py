"""The baseline: an aiohttp server that parses the same ExtenderArgs and answers without deciding anything.

`/filter` passes every node name received, `/prioritize` gives every node the same score, `/preempt` answers the
candidates as received; `/readyz` is ready.
Plain HTTP, or HTTPS when given a certificate and key: `python -m bench.extender.bare PORT [CERT KEY]`.
"""

from __future__ import annotations

import ssl
import sys

import orjson
from aiohttp import web


def _names(body: object) -> list[str]:
    if not isinstance(body, dict) or not isinstance(body.get("Pod"), dict):
        raise ValueError("not an ExtenderArgs")
    names = body.get("NodeNames")
    if not isinstance(names, list):
        raise ValueError("no NodeNames")
    return names


async def filter_handler(request: web.Request) -> web.Response:
    names = _names(orjson.loads(await request.read()))
    body = {"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def prioritize_handler(request: web.Request) -> web.Response:
    names = _names(orjson.loads(await request.read()))
    body = [{"Host": name, "Score": 0} for name in names]
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def preempt_handler(request: web.Request) -> web.Response:
    """The candidates back as received: what an extender with no opinion answers."""
    body = orjson.loads(await request.read())
    if not isinstance(body, dict) or not isinstance(body.get("NodeNameToMetaVictims"), dict):
        raise ValueError("not an ExtenderPreemptionArgs")
    return web.Response(body=orjson.dumps({"NodeNameToMetaVictims": body["NodeNameToMetaVictims"]}),
                        content_type="application/json")  # fmt: skip


async def readyz(_request: web.Request) -> web.Response:
    return web.Response(text="ready\n")


def main() -> None:
    port = int(sys.argv[1])
    context = None
    if len(sys.argv) == 4:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(sys.argv[2], sys.argv[3])
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", filter_handler)
    app.router.add_post("/prioritize", prioritize_handler)
    app.router.add_post("/preempt", preempt_handler)
    app.router.add_get("/readyz", readyz)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, access_log=None, print=None)


if __name__ == "__main__":
    main()
