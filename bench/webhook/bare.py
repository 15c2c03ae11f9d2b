"""The baseline: an aiohttp TLS server that reads the body and returns a fixed AdmissionReview."""

from __future__ import annotations

import ssl
import sys

from aiohttp import web

FIXED = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}'


async def mutate(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=FIXED, content_type="application/json")


def main() -> None:
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app.router.add_post("/mutate", mutate)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, access_log=None, print=None)


if __name__ == "__main__":
    main()
