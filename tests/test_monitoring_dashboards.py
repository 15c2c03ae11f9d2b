"""The Grafana dashboards (`gpupack/monitoring/dashboards.py`, shipped as manifests/monitoring/dashboards/*.json).

(a) The shipped files are byte for byte what the source builds. (b) Every panel has a title, the `datasource`
variable and a target; thresholds come from `gpupack.monitoring.thresholds` (changing one changes the dashboards).
(c) Against a real Prometheus over the planted week (`tests/monitoring_history.py`) with gpupack's recording rules
backfilled and loaded, every panel's query, with the template variables substituted as Grafana does, parses and
returns series, and every template variable resolves to values; a few panels are checked against what was planted.

Grafana's variables as substituted here: `$node` with All is the variable's `allValue` (`.*`), else the regex of
every value of its query (`(hot-1|idle-1|...)`); `$__interval` is the dashboard's range over 1,000 points as Grafana
rounds it, at least the scrape interval (7 days: 10m, 6 hours: 1m); `$__rate_interval` is max($__interval + scrape
interval, 4 x scrape interval), the datasource's scrape interval set to 1m, the planted history's resolution;
`$__range` is the dashboard's range. Range queries run over the dashboard's default range ending at the last planted
sample, with `$__interval` as the step; instant queries at that sample.
"""

from __future__ import annotations

import importlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

import gpupack.monitoring.dashboards as dashboards_module
import gpupack.monitoring.thresholds
from gpupack.monitoring.dashboards import (
    DATASOURCE,
    EXTENDER_JOB,
    WEBHOOK_JOB,
    dashboards,
    ksm_allowlist,
    render,
    spot_selectors,
)
from tests.monitoring_history import HAVE_PROMETHEUS, MISSING, PLANTED, get, minute, monitoring_prometheus, seconds

pytestmark = pytest.mark.timeout(300)  # the live fixture takes ~10-20 s to build, more on a busy machine
ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "manifests" / "monitoring" / "dashboards"
RULES = ROOT / "manifests" / "monitoring" / "prometheus" / "gpupack-rules.yaml"
NO_RULES = f"{RULES.relative_to(ROOT)} is not on this branch yet: the panels read its recording rules"
SCRAPE = 60.0
"""The datasource's scrape interval as Grafana would be told: the planted history's resolution."""
BUILTIN = {"__interval", "__interval_ms", "__rate_interval", "__range", "__range_s", "__range_ms"}
DASHBOARDS = dashboards()
PANELS = [(stem, panel) for stem, model in DASHBOARDS.items() for panel in model["panels"]]
TARGETS = [(stem, panel["title"], t["refId"]) for stem, panel in PANELS for t in panel["targets"]]


def panel_id(value: object) -> str:
    return re.sub(r"\W+", "-", str(value)).strip("-")


# (a) the shipped files ----------------------------------------------------------------------------------------------


def test_the_shipped_json_is_what_the_source_builds() -> None:
    assert sorted(p.name for p in SHIPPED.glob("*.json")) == sorted(f"{stem}.json" for stem in DASHBOARDS)
    for stem, model in DASHBOARDS.items():
        shipped = (SHIPPED / f"{stem}.json").read_text()
        assert shipped == render(model), f"{stem}.json differs from the source: run `python -m gpupack.monitoring`"
        assert json.loads(shipped) == model


def test_write_writes_every_dashboard(tmp_path: Path) -> None:
    paths = dashboards_module.write(tmp_path / "out")
    assert [p.name for p in paths] == ["gpu-cost.json", "gpupack.json"]
    assert all(p.read_text() == (SHIPPED / p.name).read_text() for p in paths)


# (b) structure ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stem", "panel"), PANELS, ids=[f"{s}-{panel_id(p['title'])}" for s, p in PANELS])
def test_every_panel_has_a_title_the_datasource_variable_and_targets(stem: str, panel: dict[str, Any]) -> None:
    assert panel["title"] and panel["description"]
    assert panel["datasource"] == DATASOURCE == {"type": "prometheus", "uid": "${datasource}"}
    assert panel["targets"], "no query"
    assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
    for t in panel["targets"]:
        assert t["datasource"] == DATASOURCE and t["expr"].strip() and t["instant"] != t["range"]


def test_titles_ids_and_uids_are_unique_and_panels_do_not_overlap() -> None:
    assert len({m["uid"] for m in DASHBOARDS.values()}) == len(DASHBOARDS)
    for stem, model in DASHBOARDS.items():
        panels = model["panels"]
        assert [p["id"] for p in panels] == list(range(1, len(panels) + 1)), stem
        assert len({p["title"] for p in panels}) == len(panels), stem
        cells: set[tuple[int, int]] = set()
        for p in panels:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not mine & cells, f"{p['title']} overlaps another panel"
            cells |= mine


def test_the_template_variables_are_nvidias_datasource_and_a_node_picker() -> None:
    datasource, node = DASHBOARDS["gpu-cost"]["templating"]["list"]
    assert (datasource["type"], datasource["name"], datasource["query"]) == ("datasource", "datasource", "prometheus")
    assert DASHBOARDS["gpupack"]["templating"]["list"] == [datasource]
    assert node["type"] == "query" and node["name"] == "node" and node["datasource"] == DATASOURCE
    # every GPU node kube-state-metrics knows, measured or not; All is `.*`, not a regex of a thousand names
    assert node["query"] == node["definition"] == "label_values(gpupack:node_gpu_allocatable:sum, node)"
    assert node["multi"] and node["includeAll"] and node["allValue"] == ".*" and node["refresh"] == 2


def test_every_variable_a_query_uses_is_defined_or_grafanas() -> None:
    for stem, model in DASHBOARDS.items():
        defined = {v["name"] for v in model["templating"]["list"]} | BUILTIN
        used = {m for s, p in PANELS if s == stem for t in p["targets"] for m in re.findall(r"\$\{?(\w+)", t["expr"])}
        assert used <= defined, (stem, used - defined)
    node_panels = [p["title"] for s, p in PANELS if s == "gpu-cost" and "$node" in json.dumps(p["targets"])]
    assert len(node_panels) >= 15, node_panels


def test_the_class_thresholds_come_from_monitoring_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = dashboards_module.UTILIZATION_CLASSES["steps"]
    assert [s["value"] for s in steps] == [None, 10.0, 30.0, 85.0]
    text = json.dumps(DASHBOARDS["gpu-cost"])
    assert "> 85)" in text and "< 10)" in text and ">= 10 < 30)" in text
    # A changed threshold changes every place it is used, and no copy keeps the old number.
    monkeypatch.setattr(gpupack.monitoring.thresholds, "HOT", 84.0)
    monkeypatch.setattr(gpupack.monitoring.thresholds, "IDLE", 9.0)
    try:
        changed = importlib.reload(dashboards_module).dashboards()["gpu-cost"]
    finally:
        monkeypatch.undo()
        importlib.reload(dashboards_module)
    text = json.dumps(changed)
    assert "> 84)" in text and "< 9)" in text and ">= 9 < 30)" in text
    assert "85" not in text and "over 84 %" in text
    per_node = next(p for p in changed["panels"] if p["title"] == "GPU utilization per node")
    assert [s["value"] for s in per_node["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 9.0, 30.0, 84.0]


def test_job_names_are_the_metrics_services_and_spot_is_the_policys_label() -> None:
    for job, path in ((WEBHOOK_JOB, "webhook"), (EXTENDER_JOB, "extender")):
        names = [
            d["metadata"]["name"] for d in yaml.safe_load_all((ROOT / "manifests" / path / "service.yaml").read_text())
        ]
        assert job in names
    assert spot_selectors()[0] == 'label_karpenter_sh_capacity_type="spot"'
    assert 'label_node_type="spot"' in spot_selectors() and len(spot_selectors()) == 6
    assert ksm_allowlist() == (
        "--metric-labels-allowlist=nodes=[karpenter.sh/capacity-type,eks.amazonaws.com/capacityType,"
        "cloud.google.com/gke-spot,cloud.google.com/gke-preemptible,kubernetes.azure.com/scalesetpriority,node-type]"
    )


# (c) every query against the planted week --------------------------------------------------------------------------


class Live(NamedTuple):
    url: str
    end: float


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if not HAVE_PROMETHEUS:
        pytest.skip(MISSING)
    if not RULES.exists():
        pytest.skip(NO_RULES)
    now = time.time()
    with monitoring_prometheus(tmp_path_factory.mktemp("dashboards"), [RULES], now=now) as url:
        yield Live(url, minute(now))


def label_values(live: Live, query: str, start: float) -> list[str]:
    """Grafana's `label_values(metric, label)` for the Prometheus datasource: the label's values on the series of
    the metric over the time range."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert match, query
    metric, label = match.groups()
    values: list[str] = get(
        live.url, f"/api/v1/label/{label}/values", **{"match[]": metric, "start": str(start), "end": str(live.end)}
    )
    return values


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable in a `=~` matcher, as Grafana's Prometheus datasource writes it."""
    escaped = [re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


ROUNDED = [
    (1.5, 1),
    (3.5, 2),
    (7.5, 5),
    (12.5, 10),
    (17.5, 15),
    (25, 20),
    (45, 30),
    (90, 60),
    (210, 120),
    (450, 300),
    (750, 600),
    (1050, 900),
    (1500, 1200),
    (2700, 1800),
    (5400, 3600),
    (9000, 7200),
    (16200, 10800),
    (32400, 21600),
    (86400, 43200),
    (604800, 86400),
]
"""Grafana's `roundInterval`: an interval under the first number becomes the second (seconds)."""


def variables(live: Live, model: dict[str, Any]) -> tuple[dict[str, str], float, float]:
    """Each variable's text in a query, the range (s) and the interval (s)."""
    span = seconds(model["time"]["from"].removeprefix("now-"))
    rounded = next((r for under, r in ROUNDED if span / 1000 < under), 604800)
    interval = max(rounded, SCRAPE)  # the datasource's scrape interval is $__interval's floor
    out = {
        "__interval": f"{interval:g}s",
        "__interval_ms": f"{interval * 1000:g}",
        "__rate_interval": f"{max(interval + SCRAPE, 4 * SCRAPE):g}s",
        "__range": f"{span:g}s",
        "__range_s": f"{span:g}",
        "__range_ms": f"{span * 1000:g}",
    }
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":  # All: the variable's allValue, else the regex of every value
            found = label_values(live, variable["query"], live.end - span)
            out[variable["name"]] = variable.get("allValue") or grafana_regex(found)
    return out, span, float(interval)


def substitute(expr: str, values: dict[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):  # $__range_s before $__range
        expr = expr.replace(f"${{{name}}}", values[name]).replace(f"${name}", values[name])
    assert "$" not in expr, expr
    return expr


def run(live: Live, stem: str, title: str, ref: str) -> list[dict[str, Any]]:
    """The target's result as the panel would get it."""
    model = DASHBOARDS[stem]
    panel = next(p for p in model["panels"] if p["title"] == title)
    t = next(t for t in panel["targets"] if t["refId"] == ref)
    values, span, interval = variables(live, model)
    expr = substitute(t["expr"], values)
    if t["instant"]:
        result: list[dict[str, Any]] = get(live.url, "/api/v1/query", query=expr, time=str(live.end))["result"]
    else:
        params = {"query": expr, "start": str(live.end - span), "end": str(live.end), "step": f"{interval:g}"}
        result = get(live.url, "/api/v1/query_range", **params)["result"]
    return result


@pytest.mark.parametrize(("stem", "title", "ref"), TARGETS, ids=[f"{s}-{panel_id(t)}-{r}" for s, t, r in TARGETS])
def test_every_panel_query_parses_and_returns_series(live: Live, stem: str, title: str, ref: str) -> None:
    assert run(live, stem, title, ref), "no series"


def test_every_template_variable_resolves(live: Live) -> None:
    for model in DASHBOARDS.values():
        for variable in model["templating"]["list"]:
            if variable["type"] == "datasource":
                assert variable["query"] == "prometheus"
                continue
            values = label_values(live, variable["query"], live.end - 7 * 86400)
            assert values, variable["name"]
    nodes = label_values(live, "label_values(gpupack:node_gpu_allocatable:sum, node)", live.end - 86400)
    assert sorted(nodes) == sorted(n.name for n in PLANTED.gpu_nodes)  # every GPU node, not cpu-1


def instant(live: Live, stem: str, title: str, ref: str = "A", *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(b, "") for b in labels): float(r["value"][1]) for r in run(live, stem, title, ref)}


def test_the_class_counts_match_the_planted_nodes(live: Live) -> None:
    assert instant(live, "gpu-cost", "Idle nodes") == {(): 1}  # idle-1
    assert instant(live, "gpu-cost", "Underused nodes") == {(): 1}  # under-1
    assert instant(live, "gpu-cost", "Hot nodes") == {(): 1}  # hot-1, whose 7-day mean is about 50 %
    assert instant(live, "gpu-cost", "OK nodes") == {(): 5}  # ok-1, held-1, mig-1, xid-1, spot-1
    week = instant(live, "gpu-cost", "Node utilization class, 7-day mean", "A", "node")
    assert week == pytest.approx({(n.name,): n.mean_utilization(7 * 86400) for n in PLANTED.gpu_nodes}, abs=0.5)


def test_the_capacity_panels_name_the_planted_pods_and_nodes(live: Live) -> None:
    assert instant(live, "gpu-cost", "GPU pods pending now", "A", "namespace", "pod") == {("ml", "pending-0"): 1}
    empty = instant(live, "gpu-cost", "Empty GPU nodes the autoscaler can remove", "A", "node")
    assert empty == {(n,): 2 for n in PLANTED.empty_gpu_nodes}  # idle-1's finished pod does not count
    free = instant(live, "gpu-cost", "GPUs requested and allocatable, by node", "C", "node", "resource")
    assert free[("idle-1", "nvidia_com_gpu")] == 2 and free[("hot-1", "nvidia_com_gpu")] == 0
    mig = "MIG instances used and free, by profile"
    profiles = {("nvidia_com_mig_3g_40gb",): 1, ("nvidia_com_mig_4g_40gb",): 1}
    assert instant(live, "gpu-cost", mig, "A", "resource") == profiles
    assert instant(live, "gpu-cost", mig, "B", "resource") == {k: 0 for k in profiles}
    hours = "GPU-hours, spot and on-demand"
    # 7 days of spot-1's one GPU, and of the 14 physical GPUs of the 7 on-demand GPU nodes (mig-1's GPU 0 once).
    assert instant(live, "gpu-cost", hours, "A") == pytest.approx({(): 168}, rel=0.01)
    assert instant(live, "gpu-cost", hours, "B") == pytest.approx({(): 14 * 168}, rel=0.01)


def test_the_gpupack_panels_read_the_planted_services(live: Live) -> None:
    assert instant(live, "gpupack", "Webhook targets up", "A") == {(): 0}
    assert instant(live, "gpupack", "Webhook targets up", "B") == {(): 2}
    assert instant(live, "gpupack", "Extender targets up", "A") == {(): 2}
    expiry = instant(live, "gpupack", "Certificate expires in", "A", "job")
    assert expiry == pytest.approx({(WEBHOOK_JOB,): 10 * 86400}, abs=1)  # not the extender's 0
    versions = instant(live, "gpupack", "Policy version in force", "A", "job", "version")
    assert versions == {(WEBHOOK_JOB, "8e41d0c2a9f7"): 2, (EXTENDER_JOB, "8e41d0c2a9f7"): 2}
