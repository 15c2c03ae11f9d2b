"""The forecast from Prometheus: the peak of MIG instances requested, per profile, over a window.

kube-state-metrics exports each container's requests, the resource name sanitized (`nvidia.com/mig-1g.5gb` is
`nvidia_com_mig_1g_5gb`), and each pod's phase. Requests of pods Pending or Running are summed per resource at
every step of a subquery and the largest sum over the window is kept, all in PromQL, so one instant query answers
(through the report's Prometheus source, which also reaches Thanos, Mimir or VictoriaMetrics). It counts what
pods asked under the layouts of the time: a labelled pod that got `2g.10gb` because no `1g.10gb` was offered is
counted as a `2g.10gb`; the pods running now are sized again (`demand.cluster_demand`), and the plan serves the
larger of the two per profile. Init containers' requests (`kube_pod_init_container_resource_requests`) are not
read: an init container asking a MIG instance of its own is rare, and it holds it only while the pod starts.
"""

from __future__ import annotations

import re

from gpupack.core.contract import mig_resource
from gpupack.core.gpus.catalog import CATALOG
from gpupack.report.prometheus import PrometheusUsage

STEP = "5m"
"""The subquery's resolution: a pod that came and went between two steps is not seen, and 7 days at 5 m are 2,016
points per resource, well within any store's limits."""


def ksm_name(profile: str) -> str:
    """kube-state-metrics' spelling of the profile's resource: every character not `[a-zA-Z0-9_]` becomes `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", mig_resource(profile))


KSM_TO_RESOURCE = {ksm_name(p.name): mig_resource(p.name) for profiles in CATALOG.values() for p in profiles}


def forecast_query(window: str, step: str = STEP) -> str:
    """The PromQL: per resource, the peak over `window` of the MIG instances requested by unfinished pods."""
    # max by container first: two kube-state-metrics replicas (an HA pair) export every series twice
    requested = (
        "sum by (resource) (max by (namespace, pod, container, resource) "
        '(kube_pod_container_resource_requests{resource=~"nvidia_com_mig_.+"}) '
        "* on (namespace, pod) group_left () "
        'max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running"} == 1))'
    )
    return f"max_over_time(({requested})[{window}:{step}])"


def prometheus_forecast(source: PrometheusUsage, window: str, at: float) -> dict[str, int]:
    """Instances per MIG resource at their peak over the `window` (a Prometheus duration) ending at `at`.
    Resources of no catalog profile (`1g.10gb+me`...) are left out. Raises what the source raises."""
    out: dict[str, int] = {}
    for labels, value in source.instant(forecast_query(window), at):
        resource = KSM_TO_RESOURCE.get(str(labels.get("resource", "")))
        if resource is not None and value is not None and value > 0:
            out[resource] = max(out.get(resource, 0), round(value))
    return dict(sorted(out.items()))
