"""The Grafana dashboards "GPU cost" and "gpupack", built in Python as plain JSON models.

`dashboards()` returns them by file stem; `write(directory)` writes `charts/gpupack/files/dashboards/*.json`
(`python -m gpupack.monitoring` does it for the shipped files; the chart, and the kustomize component rendered
from it, put them in ConfigMaps labelled `grafana_dashboard: "1"`, which kube-prometheus-stack's sidecar loads).
tests/test_monitoring_dashboards.py checks that the shipped files are exactly what this module builds, and runs every
panel's query against a Prometheus over a planted week.

Panels read gpupack's recording rules where one exists (`gpupack:node_gpu_utilization:avg5m`, ...), so a dashboard and
an alert judge the same number; the node classes' thresholds come from `gpupack.monitoring.thresholds`, and the spot
label from the policy's default (`node-type=spot`, `label_node_type` in kube-state-metrics). As in NVIDIA's
dcgm-exporter dashboard, a `datasource` variable (type `datasource`, query `prometheus`) feeds every panel and query
variable, and `node` is a multi-value variable with All, refreshed with the time range.

Plain dicts, not Grafana's grafana-foundation-sdk, after trying the SDK (1769699998!10.1.0 and
1769699379!11.6.0):
- its releases are versioned `<build timestamp>!<Grafana version>`, and pip orders by the timestamp (an epoch):
  `grafana-foundation-sdk>=X` installs whichever Grafana target was built last (today the Grafana 10.1 one), and
  the same builder code then writes other JSON (`schemaVersion` 36 or 41, `"options": null` or absent,
  `"transformations": []` or absent). The shipped files must equal what the source builds, so that would need an
  exact pin and a bump per upstream build, not a lower bound;
- its defaults are not what Grafana saves: every target gets `refId: ""`, every variable the interval
  variable's `auto`, `auto_count`, `auto_min` (and on 10.1 an all-zero `id`), to be overridden one by one;
- these dashboards use six panel types and a dozen fields: the small functions below build them as readably, and
  the JSON stays what is reviewed. What the SDK's types would check (field names) matters less than what the test
  checks: every query runs and returns series.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupack.core import dcgm
from gpupack.core.checkout import REPOSITORY
from gpupack.core.policy import SpotPolicy
from gpupack.monitoring.rules import EXTENDER_JOB, WEBHOOK_JOB
from gpupack.monitoring.thresholds import DEFAULT, HOT, IDLE, UNDERUSED

JSON = dict[str, Any]
DIRECTORY = REPOSITORY / "charts" / "gpupack" / "files" / "dashboards"
SCHEMA_VERSION = 39
"""Grafana 10.4 / 11.0's dashboard schema; later Grafana versions migrate it on load."""
DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}
NODE = 'node=~"$node"'
RATE = "$__rate_interval"


def spot_selectors() -> list[str]:
    """The default policy's recognised spot labels as kube-state-metrics writes them on `kube_node_labels`
    (`karpenter.sh/capacity-type=spot`: `label_karpenter_sh_capacity_type="spot"`); each key must be in its
    `--metric-labels-allowlist=nodes=[...]` (`ksm_allowlist`)."""
    return [
        f'label_{"".join(c if c.isalnum() else "_" for c in key)}="{value}"' for key, value in SpotPolicy().recognised
    ]


def ksm_allowlist() -> str:
    """The kube-state-metrics flag that exposes every recognised spot label key on `kube_node_labels`."""
    keys = dict.fromkeys(key for key, _ in SpotPolicy().recognised)
    return f"--metric-labels-allowlist=nodes=[{','.join(keys)}]"


def spot_nodes() -> str:
    """A series per spot node: `kube_node_labels` carrying any recognised spot label."""
    return "max by (node) (" + " or ".join(f"kube_node_labels{{{s}}}" for s in spot_selectors()) + ")"


def _thresholds(*steps: tuple[float | None, str]) -> JSON:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in steps]}


UTILIZATION_CLASSES = _thresholds((None, "dark-red"), (IDLE, "orange"), (UNDERUSED, "green"), (HOT, "purple"))
"""Idle dark red, underused orange, ok green, hot purple; a value at a threshold is in the class above it."""
CLASSES_TEXT = (
    f"Dark red: idle (under {IDLE:g} %), orange: underused (under {UNDERUSED:g} %), green: ok, "
    f"purple: hot (over {HOT:g} %)."
)


def target(expr: str, legend: str = "__auto", instant: bool = False, table: bool = False, ref: str = "A") -> JSON:
    """A Prometheus query: a range query drawn over time, or (`instant`) one value per series at the range's end;
    `table` for table panels (labels as columns)."""
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "format": "table" if table else "time_series",
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
        "refId": ref,
    }


def targets(*exprs: tuple[str, str], instant: bool = False, table: bool = False) -> list[JSON]:
    """(expr, legend) pairs as targets A, B, C..."""
    return [target(e, legend, instant, table, chr(ord("A") + i)) for i, (e, legend) in enumerate(exprs)]


@dataclass
class Panel:
    """What differs between panels; `model()` adds the rest."""

    kind: str
    title: str
    description: str
    targets: list[JSON]
    width: int = 12
    height: int = 8
    unit: str | None = None
    color: str | None = None
    """The color scheme; None: by `thresholds` when given, else the classic palette."""
    min: float | None = None
    max: float | None = None
    thresholds: JSON | None = None
    mappings: list[JSON] = field(default_factory=list)
    options: JSON = field(default_factory=dict)
    custom: JSON = field(default_factory=dict)
    no_value: str | None = None
    decimals: int | None = None
    overrides: list[JSON] = field(default_factory=list)
    transformations: list[JSON] = field(default_factory=list)

    def model(self, panel_id: int, x: int, y: int) -> JSON:
        mode = self.color or ("thresholds" if self.thresholds else "palette-classic")
        defaults: JSON = {"color": {"mode": mode}}
        if self.custom:
            defaults["custom"] = self.custom
        for key, value in (
            ("unit", self.unit),
            ("min", self.min),
            ("max", self.max),
            ("decimals", self.decimals),
            ("noValue", self.no_value),
        ):
            if value is not None:
                defaults[key] = value
        defaults["mappings"] = self.mappings
        defaults["thresholds"] = self.thresholds or _thresholds((None, "green"))
        out: JSON = {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "fieldConfig": {"defaults": defaults, "overrides": self.overrides},
            "options": self.options,
            "targets": self.targets,
        }
        if self.transformations:
            out["transformations"] = self.transformations
        return out


def _layout(panels: Sequence[Panel]) -> list[JSON]:
    """Left to right on Grafana's 24-column grid, a new row when a panel does not fit; ids from 1."""
    out: list[JSON] = []
    x = y = row_height = 0
    for i, panel in enumerate(panels, 1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        out.append(panel.model(i, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return out


def _timeseries(
    title: str, description: str, queries: list[JSON], unit: str, stack: bool = False, **extra: Any
) -> Panel:
    custom: JSON = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0, "showPoints": "never"}
    custom["spanNulls"] = False
    custom["stacking"] = {"mode": "normal" if stack else "none", "group": "A"}
    custom.update(extra.pop("custom", {}))
    options = {
        "legend": {"displayMode": "table", "placement": "right", "showLegend": True, "calcs": ["mean", "lastNotNull"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return Panel("timeseries", title, description, queries, unit=unit, custom=custom, options=options, **extra)


def _stat(title: str, description: str, queries: list[JSON], unit: str = "none", **extra: Any) -> Panel:
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
    }
    extra.setdefault("width", 4)
    extra.setdefault("height", 4)
    return Panel("stat", title, description, queries, unit=unit, options=options, **extra)


def _table(title: str, description: str, queries: list[JSON], columns: dict[str, str], **extra: Any) -> Panel:
    """A table of instant queries merged on their common labels; `columns` renames (and orders) the fields kept,
    the others are hidden: `Value #A` is query A's value."""
    organize = {
        "excludeByName": {"Time": True, "__name__": True},
        "indexByName": {name: i for i, name in enumerate(columns)},
        "renameByName": columns,
    }
    transformations = [{"id": "merge", "options": {}}, {"id": "organize", "options": organize}]
    transformations.append({"id": "filterFieldsByName", "options": {"include": {"names": list(columns.values())}}})
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
    return Panel("table", title, description, queries, options=options, transformations=transformations, **extra)


def _bargauge(title: str, description: str, queries: list[JSON], unit: str, **extra: Any) -> Panel:
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
        "valueMode": "color",
        "minVizHeight": 10,
        "minVizWidth": 0,
        "namePlacement": "auto",
        "sizing": "auto",
    }
    return Panel("bargauge", title, description, queries, unit=unit, options=options, **extra)


def _dashboard(
    uid: str, title: str, description: str, panels: Sequence[Panel], variables: list[JSON], since: str
) -> JSON:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["gpupack", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": since, "to": "now"},
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": [
            {"type": "dashboards", "tags": ["gpupack"], "asDropdown": False, "title": "gpupack", "includeVars": False}
        ],
        "annotations": {"list": []},
        "templating": {"list": variables},
        "panels": _layout(panels),
    }


def datasource_variable() -> JSON:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(name: str, label: str, query: str, all_value: str | None = None) -> JSON:
    """Values from `label_values(metric, label)`, several or All, refreshed whenever the time range changes.
    All is `all_value` when given (`.*`: every node, also those the variable's query has not seen, and one
    short regex instead of a thousand names), else the regex of every value."""
    extra = {} if all_value is None else {"allValue": all_value}
    return {
        **extra,
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": query,
        "current": {},
        "hide": 0,
        "includeAll": True,
        "multi": True,
        "options": [],
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
    }


# GPU cost ---------------------------------------------------------------------------------------------------------


def gpu_cost() -> JSON:
    spot = spot_nodes()
    node_util, node_util_1h = (
        f"gpupack:node_gpu_utilization:avg5m{{{NODE}}}",
        f"gpupack:node_gpu_utilization:avg1h{{{NODE}}}",
    )
    week = f"avg_over_time({node_util_1h}[7d])"
    requested, allocatable = f"gpupack:node_gpu_requested:sum{{{NODE}}}", f"gpupack:node_gpu_allocatable:sum{{{NODE}}}"
    empty = f"sum by (node) ({allocatable}) unless on (node) (sum by (node) ({requested}) > 0)"
    gpus = f"count by (node) (gpupack:gpu_utilization:avg5m{{{NODE}}})"
    mig = 'resource=~"nvidia_com_mig_.+"'
    mig_allocatable = f"sum by (resource) (gpupack:node_gpu_allocatable:sum{{{mig}, {NODE}}})"
    mig_requested = f"sum by (resource) (gpupack:node_gpu_requested:sum{{{mig}, {NODE}}})"
    classes: JSON = {"thresholds": UTILIZATION_CLASSES, "unit": "percent", "min": 0, "max": 100, "decimals": 1}
    panels = [
        _stat(
            "Idle nodes",
            f"GPU nodes whose mean GPU utilization over 7 days is under {IDLE:g} %: scale them down or share them "
            "first (GPUNodeIdle).",
            [target(f"count({week} < {IDLE:g})", "idle", instant=True)],
            no_value="0",
            thresholds=_thresholds((None, "green"), (1, "dark-red")),
        ),
        _stat(
            "Underused nodes",
            f"GPU nodes whose mean GPU utilization over 7 days is {IDLE:g} % to {UNDERUSED:g} % (GPUNodeUnderused).",
            [target(f"count({week} >= {IDLE:g} < {UNDERUSED:g})", "underused", instant=True)],
            no_value="0",
            thresholds=_thresholds((None, "green"), (1, "orange")),
        ),
        _stat(
            "OK nodes",
            f"GPU nodes at {UNDERUSED:g} % or more over 7 days and not hot now.",
            [target(f"count(({week} >= {UNDERUSED:g}) unless on (node) ({node_util} > {HOT:g}))", "ok", instant=True)],
            no_value="0",
        ),
        _stat(
            "Hot nodes",
            f"GPU nodes over {HOT:g} % mean GPU utilization over the last 5 minutes: capacity may be short "
            f"(GPUNodeHot, after {DEFAULT.hot_for}).",
            [target(f"count({node_util} > {HOT:g})", "hot", instant=True)],
            no_value="0",
            thresholds=_thresholds((None, "green"), (1, "purple")),
        ),
        _stat(
            "Pending GPU pods",
            "Pods requesting a GPU resource that are Pending and not scheduled: the cluster may have scaled down "
            f"too far (GPUPodsPending, after {DEFAULT.pending_for}).",
            [target("gpupack:gpu_pods_pending:count", "pending", instant=True)],
            no_value="0",
            thresholds=_thresholds((None, "green"), (1, "red")),
        ),
        _stat(
            "Empty GPU nodes",
            "GPU nodes where no running or pending pod requests a GPU resource: the cluster autoscaler can remove "
            "them (unless something else blocks it).",
            [target(f"count({empty})", "empty", instant=True)],
            no_value="0",
            thresholds=_thresholds((None, "green"), (1, "orange")),
        ),
        _timeseries(
            "GPU utilization per node",
            "Mean GPU utilization of each node's GPUs over 5 minutes (a MIG GPU's instances folded by compute "
            f"slices). The dashed lines are the class thresholds. {CLASSES_TEXT}",
            [target(node_util, "{{node}}")],
            "percent",
            min=0,
            max=100,
            thresholds=UTILIZATION_CLASSES,
            custom={"thresholdsStyle": {"mode": "dashed"}},
            width=16,
            height=9,
        ),
        _bargauge(
            "Node utilization class, 7-day mean",
            f"Each node's mean GPU utilization over the last 7 days, the alerts' weekly measure. {CLASSES_TEXT}",
            [target(week, "{{node}}", instant=True)],
            width=8,
            height=9,
            **classes,
        ),
        Panel(
            "state-timeline",
            "Utilization class per node over time",
            f"Each node's class by its 1-hour mean GPU utilization. {CLASSES_TEXT}",
            [target(node_util_1h, "{{node}}")],
            width=24,
            height=8,
            custom={"fillOpacity": 80, "lineWidth": 0},
            options={
                "showValue": "never",
                "mergeValues": False,
                "alignValue": "left",
                "rowHeight": 0.9,
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "single", "sort": "none"},
            },
            **classes,
        ),
        _timeseries(
            "GPU utilization per GPU",
            "Each physical GPU's utilization over 5 minutes (DCGM_FI_DEV_GPU_UTIL; MIG GPUs by engine activity "
            "folded by compute slices).",
            [target(f"gpupack:gpu_utilization:avg5m{{{NODE}}}", "{{node}} GPU {{gpu}}")],
            "percent",
            min=0,
            max=100,
        ),
        _timeseries(
            "GPU memory used per GPU",
            "Framebuffer used over total per whole GPU. High memory at low utilization is memory held idle "
            "(GPUMemoryHeldIdle).",
            [target(f"gpupack:gpu_memory_used:ratio{{{NODE}}}", "{{node}} GPU {{gpu}}")],
            "percentunit",
            min=0,
            max=1,
        ),
        _table(
            "GPUs requested and allocatable, by node",
            "Per node and GPU resource (kube-state-metrics' names: nvidia_com_gpu, nvidia_com_gpu_shared, "
            "nvidia_com_mig_3g_40gb...): requested by pods not finished, allocatable, and free.",
            targets(
                (allocatable, "allocatable"),
                (requested, "requested"),
                (f"{allocatable} - ({requested} or {allocatable} * 0)", "free"),
                instant=True,
                table=True,
            ),
            {
                "node": "Node",
                "resource": "Resource",
                "Value #A": "Allocatable",
                "Value #B": "Requested",
                "Value #C": "Free",
            },
            height=9,
        ),
        _timeseries(
            "GPU resources requested and allocatable",
            "Summed over the selected nodes, per resource: the gap is capacity paid for and not asked for.",
            targets(
                (f"sum by (resource) ({allocatable})", "allocatable {{resource}}"),
                (f"sum by (resource) ({requested})", "requested {{resource}}"),
            ),
            "none",
            height=9,
        ),
        _table(
            "Empty GPU nodes the autoscaler can remove",
            "GPU nodes where no running or pending pod requests a GPU resource, with their allocatable GPU "
            "resources. DaemonSet pods (the DCGM exporter...) do not keep a node.",
            [target(empty, "{{node}}", instant=True, table=True)],
            {"node": "Node", "Value": "GPU resources allocatable"},
        ),
        _table(
            "GPU pods pending now",
            "Pods requesting a GPU resource that are Pending now.",
            [target("gpupack:gpu_pod_pending > 0", "{{namespace}}/{{pod}}", instant=True, table=True)],
            {"namespace": "Namespace", "pod": "Pod"},
        ),
        _timeseries(
            "Pending GPU pods over time",
            "How many pods requesting a GPU resource were Pending.",
            [target("gpupack:gpu_pods_pending:count", "pending")],
            "none",
            decimals=0,
            min=0,
        ),
        _table(
            "MIG instances used and free, by profile",
            "MIG instances advertised (kube-state-metrics' nvidia_com_mig_* resources) on the selected nodes: "
            "requested by pods not finished, and free.",
            targets(
                (mig_requested, "used"),
                (f"{mig_allocatable} - ({mig_requested} or {mig_allocatable} * 0)", "free"),
                instant=True,
                table=True,
            ),
            {"resource": "Profile", "Value #A": "Used", "Value #B": "Free"},
        ),
        _bargauge(
            "MIG instance memory used",
            "Each MIG instance's framebuffer used over its profile's memory: near 1 the next allocation runs out "
            "of memory (MIGInstanceNearOOM).",
            [
                target(
                    f"gpupack:mig_memory_used:ratio{{{NODE}}}",
                    f"{{{{node}}}} GPU {{{{gpu}}}} {{{{{dcgm.PROFILE}}}}} #{{{{{dcgm.INSTANCE}}}}}",
                    instant=True,
                )
            ],
            "percentunit",
            min=0,
            max=1,
            color="continuous-GrYlRd",
        ),
        _timeseries(
            "GPUs on spot and on-demand nodes",
            "Physical GPUs reporting DCGM metrics, on nodes with a spot label (Karpenter's, a cloud's or "
            "node-type=spot) and on the others.",
            targets(
                (f"sum({gpus} and on (node) {spot})", "spot"),
                (f"sum({gpus} unless on (node) {spot})", "on-demand"),
            ),
            "none",
            stack=True,
            decimals=0,
            min=0,
        ),
        _stat(
            "GPU-hours, spot and on-demand",
            "GPU-hours over the dashboard's time range: the physical GPUs of each kind of node, sampled every 5 "
            "minutes (each sample is 1/12 of an hour).",
            targets(
                (f"sum_over_time(sum({gpus} and on (node) {spot})[$__range:5m]) / 12", "spot"),
                (f"sum_over_time(sum({gpus} unless on (node) {spot})[$__range:5m]) / 12", "on-demand"),
                instant=True,
            ),
            unit="suffix: GPU-h",
            decimals=0,
            width=12,
            height=8,
        ),
    ]
    variables = [
        datasource_variable(),
        # From allocatable, not utilization: a GPU node whose exporter is broken is the waste to see.
        query_variable("node", "Node", "label_values(gpupack:node_gpu_allocatable:sum, node)", all_value=".*"),
    ]
    description = (
        "Where GPU money goes: utilization classes per node, requests against capacity, nodes the autoscaler can "
        "remove, pending GPU pods, MIG capacity, spot and on-demand GPU-hours. Built by "
        "gpupack/monitoring/dashboards.py."
    )
    return _dashboard("gpupack-gpu-cost", "GPU cost", description, panels, variables, "now-7d")


# gpupack ----------------------------------------------------------------------------------------------------------


def _quantiles(metric: str, by: str, legend: str) -> list[JSON]:
    buckets = f"sum by ({by}) (rate({metric}_bucket[{RATE}]))"
    return targets(
        (f"histogram_quantile(0.5, {buckets})", f"p50{legend}"),
        (f"histogram_quantile(0.99, {buckets})", f"p99{legend}"),
    )


def gpupack() -> JSON:
    webhook, extender = f'job="{WEBHOOK_JOB}"', f'job="{EXTENDER_JOB}"'
    live = [{"type": "value", "options": {"0": {"text": "no", "color": "red"}, "1": {"text": "yes", "color": "green"}}}]
    stale = [
        {"type": "value", "options": {"0": {"text": "fresh", "color": "green"}, "1": {"text": "stale", "color": "red"}}}
    ]
    panels = [
        _stat(
            "Webhook targets up",
            "Webhook replicas Prometheus scrapes, and how many answer. None up for 5 minutes: GpupackWebhookDown; "
            "with failurePolicy Fail, opted-in pods cannot be created meanwhile.",
            targets((f"sum(up{{{webhook}}})", "up"), (f"count(up{{{webhook}}})", "targets"), instant=True),
            thresholds=_thresholds((None, "red"), (1, "green")),
        ),
        _stat(
            "Extender targets up",
            "Extender replicas (kube-scheduler sidecars) scraped, and how many answer (GpupackExtenderDown).",
            targets((f"sum(up{{{extender}}})", "up"), (f"count(up{{{extender}}})", "targets"), instant=True),
            thresholds=_thresholds((None, "red"), (1, "green")),
        ),
        _stat(
            "Live GPU metrics",
            "Whether the extender scores on fresh DCGM samples; stale: scores are neutral on load "
            "(GpupackExtenderMetricsStale).",
            [target(f"max(gpupack_extender_metrics_stale{{{extender}}})", "metrics", instant=True)],
            mappings=stale,
            thresholds=_thresholds((None, "green"), (1, "red")),
        ),
        _stat(
            "Scheduler lease live",
            "Whether the gpupack scheduler's leader Lease is held and renewed, as the webhook last read it; "
            "when not, opted-in GPU pods go to default-scheduler, unpacked.",
            [target("min(gpupack_scheduler_lease_live)", "lease", instant=True)],
            mappings=live,
            thresholds=_thresholds((None, "red"), (1, "green")),
        ),
        _stat(
            "Certificate expires in",
            "Time left on each service's serving certificate (a service serving without TLS exports 0 and is not "
            "shown). GpupackCertificateExpiringSoon warns ahead of it.",
            [
                target(
                    "min by (job) (gpupack_certificate_expiry_timestamp_seconds > 0) - time()", "{{job}}", instant=True
                )
            ],
            unit="dtdurations",
        ),
        _stat(
            "Policy reloads refused",
            "Policy versions refused over the time range because they did not validate; the last good version "
            "keeps serving (GpupackPolicyReloadFailed).",
            [target("sum(increase(gpupack_policy_reload_failures_total[$__range]))", "refused", instant=True)],
            no_value="0",
            decimals=0,
            thresholds=_thresholds((None, "green"), (1, "red")),
        ),
        _timeseries(
            "Admissions by outcome",
            "Admission reviews answered per second: mutated, unchanged, skipped, denied, audited, error "
            "(GpupackWebhookErrors).",
            [target(f"sum by (outcome) (rate(gpupack_webhook_admissions_total[{RATE}]))", "{{outcome}}")],
            "reqps",
            stack=True,
        ),
        _timeseries(
            "Admissions by workload class",
            "Admission reviews answered per second by the pod's class (inference, training, batch), dry runs apart.",
            [
                target(
                    f"sum by (workload, dry_run) (rate(gpupack_webhook_admissions_total[{RATE}]))",
                    "{{workload}} (dry run: {{dry_run}})",
                )
            ],
            "reqps",
            stack=True,
        ),
        _timeseries(
            "Admission latency",
            "From request received to response ready; every pod create waits for it (GpupackWebhookSlow).",
            _quantiles("gpupack_webhook_admission_duration_seconds", "le", ""),
            "s",
            min=0,
        ),
        _timeseries(
            "Extender latency per verb",
            "kube-scheduler waits for each /filter and /prioritize call, for every pod it schedules.",
            _quantiles("gpupack_extender_request_duration_seconds", "verb, le", " {{verb}}"),
            "s",
            min=0,
        ),
        _timeseries(
            "Nodes filtered out, by reason",
            "Nodes /filter removed per second: spot (the pod may not use spot), no-resource, insufficient, hot.",
            [target(f"sum by (reason) (rate(gpupack_extender_filtered_nodes_total[{RATE}]))", "{{reason}}")],
            "cps",
            stack=True,
        ),
        _timeseries(
            "Extender calls per verb",
            "/filter and /prioritize calls per second, on the replica that leads.",
            [target(f"sum by (verb) (rate(gpupack_extender_request_duration_seconds_count[{RATE}]))", "{{verb}}")],
            "reqps",
        ),
        _timeseries(
            "Age of the newest live GPU sample",
            "Per extender replica; past extender.metrics.maxAgeSeconds the scores are neutral on load.",
            [target(f"max by (pod) (gpupack_extender_metrics_age_seconds{{{extender}}})", "{{pod}}")],
            "s",
            min=0,
        ),
        _table(
            "Policy version in force",
            "The policy each service runs (a content digest of the ConfigMap), by replicas; two versions at once "
            "is a rollout, or a reload refused on some replicas.",
            [target("count by (job, version, mode) (gpupack_policy_info)", "{{version}}", instant=True, table=True)],
            {"job": "Service", "version": "Version", "mode": "Mode", "Value": "Replicas"},
        ),
        _timeseries(
            "GPU pods sent to default-scheduler",
            "Opted-in GPU pods left on default-scheduler, unpacked, because the gpupack scheduler had no live "
            "leader, per second by reason (GpupackSchedulerUnrouted).",
            [target(f"sum by (reason) (rate(gpupack_webhook_unrouted_total[{RATE}]))", "{{reason}}")],
            "reqps",
            width=24,
        ),
    ]
    description = (
        "gpupack's own health: admissions, latency, the extender's verbs and filter reasons, live metrics, the "
        "policy in force, certificates. Built by gpupack/monitoring/dashboards.py."
    )
    return _dashboard("gpupack-services", "gpupack", description, panels, [datasource_variable()], "now-6h")


def dashboards() -> dict[str, JSON]:
    """Each dashboard's JSON model by file stem."""
    return {"gpu-cost": gpu_cost(), "gpupack": gpupack()}


def render(model: JSON) -> str:
    """The file's text: 2-space indented JSON, keys in the order built, a final newline."""
    return json.dumps(model, indent=2, ensure_ascii=False) + "\n"


def write(directory: Path = DIRECTORY) -> list[Path]:
    """Write `<stem>.json` for each dashboard into `directory` (created if missing); returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, model in dashboards().items():
        path = directory / f"{stem}.json"
        path.write_text(render(model))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write(Path(sys.argv[1]) if len(sys.argv) > 1 else DIRECTORY):
        print(written)
