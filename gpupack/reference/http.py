"""docs/reference/http.md: the routes each service answers, read from the applications the services build, each
with its handler's docstring (what it takes, what it answers, how it refuses)."""

from __future__ import annotations

import inspect

from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupack.core.server import add_standard_routes
from gpupack.extender.service import ExtenderConfig
from gpupack.extender.service import build_app as build_extender
from gpupack.reference.markdown import GENERATED, code, paragraph
from gpupack.reference.metrics import OFFLINE
from gpupack.webhook.service import WebhookConfig
from gpupack.webhook.service import build_app as build_webhook

STANDARD = ("/healthz", "/readyz", "/metrics")


def _routes(app: web.Application, standard: bool) -> list[tuple[str, str, str]]:
    """(method, path, handler docstring) of each route but HEAD (aiohttp adds one beside each GET), the standard
    routes left to the health listener's section."""
    out = []
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        path = str(info.get("path") or info.get("formatter") or "")
        if path in STANDARD and not standard:
            continue
        out.append((route.method, path, inspect.cleandoc(route.handler.__doc__ or "")))
    return out


def _section(title: str, about: str, app: web.Application, standard: bool = False) -> str:
    out = [f"## {title}\n", about + "\n"]
    for method, path, doc in _routes(app, standard):
        out.append(f"### {code(f'{method} {path}')}\n")
        if not doc:
            raise ValueError(f"{method} {path}: the handler has no docstring")
        out.append(paragraph(doc) + "\n")
    return "\n".join(out)


def page() -> str:
    """The whole page."""
    health = web.Application()
    add_standard_routes(health, CollectorRegistry(), lambda: True)
    return "\n".join(
        [
            GENERATED.format(source="the services' routes and their handlers' docstrings"),
            "# HTTP APIs\n",
            "The routes of the two services. Ports, listeners and who may call them: "
            "[Ports and network](../operations/ports.md).\n",
            _section(
                "The webhook (`gpupack webhook`)",
                "Called by the API server, over TLS, as the MutatingWebhookConfiguration says.",
                build_webhook(WebhookConfig(policy_file=None, serve=OFFLINE), CollectorRegistry()),
            ),
            _section(
                "The extender (`gpupack extender`)",
                "Called by kube-scheduler, as the `extenders[]` entry of its configuration says (`urlPrefix` "
                "`http://127.0.0.1:8888`, `nodeCacheCapable: true`, `ignorable: true`).",
                build_extender(ExtenderConfig(policy_file=None, serve=OFFLINE), CollectorRegistry()),
            ),
            _section(
                "The health listener (both services, `--health-port`)",
                "Plain HTTP on the pod IP, for kubelet's probes and Prometheus. The serving listener answers the "
                "same routes.",
                health,
                standard=True,
            ),
        ]
    )
