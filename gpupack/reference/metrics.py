"""docs/reference/metrics.md: every metric each gpupack program exports, read from the registries the programs
build (`webhook.service.build_app`, `extender.service.build_app`, the listeners' `ServingMetrics`, and
`mig-plan --apply`'s `ApplyMetrics`), so a metric declared anywhere on those paths is listed with its own help."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gpupack.core.server import ServeOptions, ServingMetrics
from gpupack.extender.service import ExtenderConfig
from gpupack.extender.service import build_app as build_extender
from gpupack.migplan.apply import ApplyMetrics
from gpupack.reference.markdown import GENERATED, code, table
from gpupack.webhook.service import WebhookConfig
from gpupack.webhook.service import build_app as build_webhook


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as it is exposed."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


def families(registry: CollectorRegistry) -> Iterator[Family]:
    """Each family of `registry`, sorted by name, with its label names (read from the metric objects: a family
    without samples yet shows none in `collect()`)."""
    found: dict[str, Family] = {}
    for collector in list(registry._collector_to_names):  # no public way to list collectors with their labels
        labels = tuple(getattr(collector, "_labelnames", ()))
        describe = getattr(collector, "describe", None)
        for metric in describe() if describe is not None else collector.collect():
            exposed = f"{metric.name}_total" if metric.type == "counter" else metric.name
            found[exposed] = Family(exposed, metric.type, labels, metric.documentation)
    yield from (found[name] for name in sorted(found))


def _serving(registry: CollectorRegistry) -> CollectorRegistry:
    ServingMetrics(registry)
    return registry


OFFLINE = ServeOptions(host="127.0.0.1", port=0)
"""Listener options for building the apps here: nothing is started."""


def programs() -> dict[str, CollectorRegistry]:
    """Each program's registry, built the way the program builds it (nothing is served or read)."""
    webhook = CollectorRegistry()
    build_webhook(WebhookConfig(policy_file=None, serve=OFFLINE), webhook)
    extender = CollectorRegistry()
    build_extender(ExtenderConfig(policy_file=None, serve=OFFLINE), extender)
    return {
        "gpupack webhook": _serving(webhook),
        "gpupack extender": _serving(extender),
        "gpupack mig-plan --apply --metrics-file": ApplyMetrics().registry,
    }


def page() -> str:
    """The whole page: a table per program."""
    out = [
        GENERATED.format(source="the metric declarations of each program"),
        "# Metrics\n",
        "What each program exports on `/metrics` (the services, on the health listener and the serving one) or "
        "writes for node-exporter's textfile collector (`mig-plan --apply --metrics-file`). Histograms also expose "
        "`_bucket`, `_sum` and `_count` series. The alerts built on them: [Monitoring](../admins/monitoring.md).\n",
    ]
    for program, registry in programs().items():
        out.append(f"## {code(program)}\n")
        out.append(
            table(
                ("metric", "type", "labels", "meaning"),
                (
                    (code(f.name), f.kind, ", ".join(code(label) for label in f.labels), f.help)
                    for f in families(registry)
                ),
            )
        )
    return "\n".join(out)
