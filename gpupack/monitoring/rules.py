"""The recording rules and alerts, as data built from `gpupack.monitoring.thresholds`: pure functions returning the rule
groups that `gpupack.monitoring.build` writes as a plain Prometheus rule file and as a PrometheusRule.

Recording rules hold what alerts and dashboards share, each computed from raw series (none reads another
recording rule), so `promtool tsdb create-blocks-from rules` can backfill any of them:

    gpupack:gpu_utilization:avg5m{node, gpu}            percent per physical GPU: GPU_UTIL of a whole GPU; a MIG
                                                         GPU's instances' engine activity, each times its share of
                                                         the GPU's compute slices (DCGM reports no GPU_UTIL for MIG;
                                                         `gpupack.core.dcgm.fold_promql`: 4 slices on an A30, else 7)
    gpupack:node_gpu_utilization:avg5m{node}            the mean over the node's GPUs
    gpupack:node_gpu_utilization:avg1h{node}            the same over an hour, every 5 m: what the weekly alerts
                                                         average (2,016 points a week, not a week of raw samples)
    gpupack:gpu_memory_used:ratio{node, gpu}            framebuffer used / (used + free), 0-1, MIG instances summed
    gpupack:mig_memory_used:ratio{node, gpu, GPU_I_ID, GPU_I_PROFILE}   the same per MIG instance
    gpupack:node_gpu_requested:sum{node, resource}      GPU resources requested by the node's pods not finished
    gpupack:node_gpu_allocatable:sum{node, resource}    GPU resources allocatable (kube-state-metrics's names:
                                                         nvidia_com_gpu, nvidia_com_gpu_shared, nvidia_com_mig_*)
    gpupack:gpu_pod_pending{namespace, pod}             1 for each pending pod requesting any GPU resource
    gpupack:gpu_pods_pending:count                      how many (0 when none)

The node comes from the DCGM exporter's host label, `Hostname` before dcgm-exporter #655 and `hostname` after it
(the node's name when the GPU Operator sets NODE_NAME), copied into `node` so that the GPU series join
kube-state-metrics's. Targets are named by the job the ServiceMonitors give them (the Service's name):
`gpupack-webhook`, `gpupack-extender-metrics`.
"""

from __future__ import annotations

from typing import Any

from gpupack.core.dcgm import (
    FB_FREE,
    FB_USED,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    HOST_LABELS,
    INSTANCE,
    PROFILE,
    XID_ERRORS,
    fold_promql,
)
from gpupack.monitoring.thresholds import DEFAULT, AlertThresholds

WEBHOOK_JOB = "gpupack-webhook"
EXTENDER_JOB = "gpupack-extender-metrics"
GPU_RESOURCES = 'resource=~"nvidia_com_.+"'
"""kube-state-metrics writes `nvidia.com/gpu` as `nvidia_com_gpu`, `nvidia.com/mig-1g.10gb` as
`nvidia_com_mig_1g_10gb`, `nvidia.com/gpu.shared` as `nvidia_com_gpu_shared`."""
RUNBOOK = "https://gpupack.github.io/gpupack/operations/runbooks/"
"""Where the alerts' runbooks are: the documentation site (mkdocs.yml's `site_url`), one page per alert, named by
the alert in lower case (`runbook_url`; tests/test_docs_site.py checks each resolves to a page of the site)."""
HOURLY_INTERVAL = "5m"


def node_of(vector: str) -> str:
    """`vector` with the exporter's host label copied into `node` (both spellings; `hostname` wins if both)."""
    out = vector
    for label in HOST_LABELS:
        out = f'label_replace({out}, "node", "$1", "{label}", "(.+)")'
    return out


def gpu_utilization(window: str) -> str:
    """Per (node, gpu), percent over `window`: a whole GPU's GPU_UTIL, else its MIG instances' engine activity
    folded into the GPU (`gpupack.core.dcgm.fold_promql`). `or` keeps the whole GPU's number where both exist."""
    util = f'avg_over_time({GPU_UTIL}{{{INSTANCE}=""}}[{window}])'
    whole = f"max by (node, gpu) ({node_of(util)})"
    mig = fold_promql(
        lambda matcher: node_of(f"avg_over_time({GR_ENGINE_ACTIVE}{{{matcher}}}[{window}])"),
        "node, gpu",
        scale=" * 100",
    )
    return f"{whole} or {mig}"


def node_utilization(window: str) -> str:
    """Per node, the mean of its GPUs' utilization over `window`, percent."""
    return f"avg by (node) ({gpu_utilization(window)})"


def memory_used(by: str, selector: str) -> str:
    """Framebuffer used over its size, 0-1, per `by`."""
    used = f"sum by ({by}) ({node_of(f'{FB_USED}{selector}')})"
    free = f"sum by ({by}) ({node_of(f'{FB_FREE}{selector}')})"
    return f"{used} / ({used} + {free})"


PENDING_GPU_POD = (
    'max by (namespace, pod) (kube_pod_status_phase{phase="Pending"} == 1) and on (namespace, pod) '
    'max by (namespace, pod) (kube_pod_status_scheduled{condition="false"} == 1) and on (namespace, pod) '
    f"(max by (namespace, pod) (kube_pod_container_resource_requests{{{GPU_RESOURCES}}}) > 0)"
)
"""Pending and not scheduled: a pod bound to a node stays Pending while its image pulls (GPU images take
minutes), which is no sign of missing capacity."""


def recording_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The recording rules: per-GPU and per-node state every evaluation, and the hourly node mean (every 5 m)."""
    live = [
        {"record": "gpupack:gpu_utilization:avg5m", "expr": gpu_utilization("5m")},
        {"record": "gpupack:node_gpu_utilization:avg5m", "expr": node_utilization("5m")},
        {"record": "gpupack:gpu_memory_used:ratio", "expr": memory_used("node, gpu", "")},
        {
            "record": "gpupack:mig_memory_used:ratio",
            "expr": memory_used(f"node, gpu, {INSTANCE}, {PROFILE}", f'{{{INSTANCE}!=""}}'),
        },
        {
            "record": "gpupack:node_gpu_requested:sum",
            "expr": (
                f'sum by (node, resource) (kube_pod_container_resource_requests{{{GPU_RESOURCES}, node!=""}} '
                "* on (namespace, pod) group_left () "
                'max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running|Unknown"} == 1))'
            ),
        },
        {
            "record": "gpupack:node_gpu_allocatable:sum",
            "expr": f"sum by (node, resource) (kube_node_status_allocatable{{{GPU_RESOURCES}}})",
        },
        {"record": "gpupack:gpu_pod_pending", "expr": PENDING_GPU_POD},
        {"record": "gpupack:gpu_pods_pending:count", "expr": f"count({PENDING_GPU_POD}) or vector(0)"},
    ]
    hourly = [{"record": "gpupack:node_gpu_utilization:avg1h", "expr": node_utilization("1h")}]
    return live, hourly


def _alert(
    name: str, expr: str, severity: str, summary: str, description: str, duration: str | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if duration is not None:
        rule["for"] = duration
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{RUNBOOK}{name.lower()}/",
    }
    return rule


def _increased(counter: str, window: str, by: str = "") -> str:
    """Some `counter` went up within `window`. The services create the series these alerts watch at 0 when
    they start (`webhook.metrics`), so `increase` sees the first event too."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (increase({counter}[{window}])) > 0"


def _days(value: float) -> str:
    return f"{value:g} * 86400"


def alert_rules(t: AlertThresholds = DEFAULT) -> tuple[list[dict[str, Any]], ...]:
    """The alerts, thresholds from `t`: those reading the per-GPU rules, the weekly classes, gpupack's own."""
    weekly = f"avg_over_time(gpupack:node_gpu_utilization:avg1h[{t.week}])"
    # Reported within the hour `week_history` ago as well as now: a node the autoscaler added yesterday is not idle
    # "for a week", and one missed evaluation back then does not make the alert flap. (An offset, not a subquery
    # over the week: that would cost every evaluation a week of inner evaluations.)
    history = f"last_over_time(gpupack:node_gpu_utilization:avg1h[1h] offset {t.week_history})"
    xid = XID_ERRORS
    gpu = [
        _alert(
            "GPUNodeHot",
            f"gpupack:node_gpu_utilization:avg5m > {t.hot:g}",
            "warning",
            "GPU node {{ $labels.node }} is above " + f"{t.hot:g} % GPU utilization",
            'The node\'s GPUs have averaged {{ $value | printf "%.0f" }} % for '
            f"{t.hot_for}: capacity may be short. Keep latency-critical pods off it, and add GPUs if pods wait.",
            t.hot_for,
        ),
        _alert(
            "GPUPodsPending",
            "gpupack:gpu_pod_pending == 1",
            "warning",
            "GPU pod {{ $labels.namespace }}/{{ $labels.pod }} has been pending for " + t.pending_for,
            "A pod requesting a GPU resource cannot be scheduled: the cluster may have scaled down too far, or no "
            "node offers the MIG profile or shared GPU it asks for. `kubectl describe pod` says why.",
            t.pending_for,
        ),
        _alert(
            "GPUMemoryHeldIdle",
            f"gpupack:gpu_memory_used:ratio >= {t.held_memory:g} and on (node, gpu) "
            f"gpupack:gpu_utilization:avg5m < {t.held_compute:g}",
            "info",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} holds its memory while it computes nothing",
            f"At least {t.held_memory:.0%} of the framebuffer has been in use at under {t.held_compute:g} % "
            f"utilization for {t.held_for}: a process keeps the GPU without using it. Find it with "
            "`gpupack report` (memory-held-idle) and right-size or stop it.",
            t.held_for,
        ),
        _alert(
            "MIGInstanceNearOOM",
            f"gpupack:mig_memory_used:ratio >= {t.mig_near_oom:g}",
            "warning",
            "MIG instance {{ $labels.GPU_I_ID }} ({{ $labels.GPU_I_PROFILE }}) of GPU {{ $labels.gpu }} on "
            "{{ $labels.node }} is near out of memory",
            "Its framebuffer is {{ $value | humanizePercentage }} used. The model may not fit the slice: raise "
            "the pod's gpupack.io/gpu-memory so the webhook picks the next larger profile.",
            t.mig_near_oom_for,
        ),
        _alert(
            "GPUXidErrors",
            # Per GPU (UUID), not per series: the exporter pod an XID kills comes back with a new series that
            # starts at the code DCGM kept, which `changes()` of the raw series would not see.
            f"(max by (node, gpu, UUID) ({node_of(xid)}) > 0) and on (node, gpu, UUID) "
            f"(changes(max by (node, gpu, UUID) ({node_of(xid)})[{t.xid_window}:1m]) > 0)"
            f" or max by (node, gpu, UUID) ({node_of('DCGM_EXP_XID_ERRORS_COUNT')}) > 0",
            "critical",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} reported XID error {{ $value }}",
            "DCGM reports an XID error (a driver-detected GPU fault; the value is its code for "
            "DCGM_FI_DEV_XID_ERRORS, the count for DCGM_EXP_XID_ERRORS_COUNT). Look the code up in NVIDIA's XID "
            "catalog; drain the node if it repeats. DCGM keeps the last code until the exporter restarts, so "
            "the alert fires when the value changes.",
        ),
    ]
    classes = [
        _alert(
            "GPUNodeIdle",
            f"{weekly} < {t.idle:g} and on (node) {history}",
            "warning",
            "GPU node {{ $labels.node }} has been idle for a week",
            'Its GPUs averaged {{ $value | printf "%.1f" }} % over ' + f"{t.week} (under {t.idle:g} %): handle "
            "it first. Label its GPU pods for gpupack so they are packed elsewhere, and clear what keeps Cluster "
            "Autoscaler from removing it (`gpupack report` lists the blockers).",
        ),
        _alert(
            "GPUNodeUnderused",
            f"{weekly} < {t.underused:g} and {weekly} >= {t.idle:g} and on (node) {history}",
            "info",
            "GPU node {{ $labels.node }} has been underused for a week",
            'Its GPUs averaged {{ $value | printf "%.1f" }} % over ' + f"{t.week} (under {t.underused:g} %): "
            "share them (MIG or time-slicing through gpupack's labels) and let the autoscaler remove the nodes "
            "packing empties.",
        ),
    ]
    slow = (
        f"histogram_quantile(0.99, sum by (le) (rate(gpupack_webhook_admission_duration_seconds_bucket[5m]))) "
        f"> {t.slow_seconds:g}"
    )
    gpupack = [
        _alert(
            "GpupackWebhookDown",
            f'absent(up{{job="{WEBHOOK_JOB}"}} == 1)',
            "critical",
            "No healthy gpupack webhook target",
            "With failurePolicy: Fail, labelled pods cannot be created while the webhook is down. Check the "
            "gpupack-webhook pods in gpupack-system (`kubectl -n gpupack-system get pods`) and their logs.",
            t.down_for,
        ),
        _alert(
            "GpupackWebhookErrors",
            _increased('gpupack_webhook_admissions_total{outcome="error"}', t.error_window),
            "warning",
            "The gpupack webhook answered admissions with errors",
            "An unexpected error refused an opted-in GPU pod (it was not created unmutated). The webhook's log "
            "names the request uid and the error.",
        ),
        _alert(
            "GpupackWebhookSlow",
            slow,
            "warning",
            "gpupack admissions are slow (p99 {{ $value | humanizeDuration }})",
            f"Every pod create waits for the webhook; its p99 has been above {t.slow_seconds * 1000:g} ms for "
            f"{t.slow_for}. Check the webhook's CPU limit and its log for large reviews.",
            t.slow_for,
        ),
        _alert(
            "GpupackExtenderDown",
            f'absent(up{{job="{EXTENDER_JOB}"}} == 1)',
            "critical",
            "No healthy gpupack extender target",
            "kube-scheduler's gpupack profile calls the extender for GPU pods (`ignorable: true`): while it is "
            "down they are scheduled without it, so not packed and not kept off hot or full GPUs.",
            t.down_for,
        ),
        _alert(
            "GpupackExtenderMetricsStale",
            "gpupack_extender_metrics_stale == 1",
            "warning",
            "The gpupack extender is scoring without live GPU utilization",
            "Its DCGM data is older than extender.metrics.maxAgeSeconds: nodes score neutral on load, so shared "
            "GPUs are packed blind. Check Prometheus and the DCGM exporter "
            "(gpupack_extender_metrics_read_failures_total).",
            t.stale_for,
        ),
        _alert(
            "GpupackPolicyReloadFailed",
            # While the file stays invalid (a restarted pod would not start), and for a while after each refusal.
            "min by (job) (gpupack_policy_file_valid) == 0 or "
            + _increased("gpupack_policy_reload_failures_total", t.error_window, "job"),
            "warning",
            "A gpupack policy change was refused",
            "The new ConfigMap did not validate; the last good policy stays in force, but a pod that restarts "
            "now will not start. The log line names the field: fix the ConfigMap, or preview it with "
            "`gpupack mutate --config`.",
        ),
        _alert(
            "GpupackCertificateExpiringSoon",
            # 0: the service serves no TLS (the extender on loopback), so it has no certificate to expire.
            f"(gpupack_certificate_expiry_timestamp_seconds > 0) - time() < {_days(t.certificate_days)}",
            "warning",
            "The certificate of {{ $labels.job }} expires in {{ $value | humanizeDuration }}",
            f"Under {t.certificate_days:g} days left. Renew the Secret (`gpupack certs`, or cert-manager); the "
            "services reload it without a restart.",
        ),
        _alert(
            "GpupackSchedulerUnrouted",
            _increased("gpupack_webhook_unrouted_total", t.error_window, "reason"),
            "warning",
            "GPU pods went to the default scheduler: the gpupack scheduler has no live leader ({{ $labels.reason }})",
            "They run, but are not packed. Check the gpupack-scheduler pods and their leader Lease "
            "(`kubectl -n gpupack-system get lease gpupack-scheduler`).",
        ),
    ]
    return gpu, classes, gpupack


def groups(t: AlertThresholds = DEFAULT) -> list[dict[str, Any]]:
    """Every rule group. An alert sits in the group of the recording rules it reads, after them: rules of one group
    run in order and each sees the ones before at the same evaluation, while groups run concurrently (in
    Prometheus, and in an order that changes from run to run in `promtool test rules`), so an alert in another
    group would see the recorded value of this evaluation or of the last one, a minute's difference at a
    duration's boundary."""
    live, hourly = recording_rules()
    gpu, weekly, gpupack = alert_rules(t)
    return [
        {"name": "gpupack-gpu", "rules": live + gpu},
        {"name": "gpupack-gpu-weekly", "interval": HOURLY_INTERVAL, "rules": hourly + weekly},
        {"name": "gpupack", "rules": gpupack},
    ]


def alert_names(t: AlertThresholds = DEFAULT) -> list[str]:
    """The alerts, in file order."""
    return [rule["alert"] for rules in alert_rules(t) for rule in rules]
