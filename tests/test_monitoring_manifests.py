"""The monitoring component and the plain-Prometheus files: both builds work and leave `manifests/` as it was,
every object of them and every example of examples/gpu-stack/ validates against its schema (core kinds with
kubernetes-validate, custom resources against the vendored CRDs), and the scrape targets are the ports and job
names the rules expect. What the examples say is checked in test_gpu_stack_examples.py."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT
from tests.crd_kit import crds, custom_errors, is_custom, load_documents

MONITORING = ROOT / "manifests" / "monitoring"
OVERLAY = ROOT / "overlays" / "with-monitoring"
PLAIN = MONITORING / "prometheus"
EXAMPLES = ROOT / "examples" / "gpu-stack"
NAMESPACE = "gpupack-system"
# The Services and ports Prometheus must scrape, and the job names the alert rules match them by.
SCRAPED = {"gpupack-webhook": "metrics", "gpupack-extender-metrics": "metrics"}
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]

Obj = dict[str, Any]


def build(path: Path) -> list[Obj]:
    out = subprocess.run(["kubectl", "kustomize", str(path)], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return build(ROOT / "manifests")


@pytest.fixture(scope="module")
def with_monitoring() -> list[Obj]:
    return build(OVERLAY)


def key(obj: Obj) -> tuple[str, str, str | None, str]:
    return (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def example_objects() -> list[Obj]:
    return [doc for path in sorted(EXAMPLES.glob("*.yaml")) for doc in load_documents(path)]


# --- the builds -----------------------------------------------------------------------------------------------


def test_the_component_adds_its_objects_and_changes_only_the_two_service_labels(
    base: list[Obj], with_monitoring: list[Obj]
) -> None:
    """`manifests/` builds without any monitoring object; the overlay is the same build plus the component's
    five objects, and the only base objects it touches are the two Services, which gain the label their
    ServiceMonitors select."""
    assert not [o for o in base if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert not [o for o in base if "grafana_dashboard" in o["metadata"].get("labels", {})]
    before = {key(o): o for o in base}
    after = {key(o): o for o in with_monitoring}
    assert before.keys() <= after.keys()
    added = {(kind, namespace, name) for _, kind, namespace, name in after.keys() - before.keys()}
    assert added == {
        ("PrometheusRule", NAMESPACE, "gpupack"),
        ("ServiceMonitor", NAMESPACE, "gpupack-webhook"),
        ("ServiceMonitor", NAMESPACE, "gpupack-extender"),
        ("ConfigMap", "monitoring", "gpupack-dashboard-gpu-cost"),
        ("ConfigMap", "monitoring", "gpupack-dashboard-gpupack"),
    }
    changed = {k[3]: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert set(changed) == set(SCRAPED)
    for old, new in changed.values():
        undone = copy.deepcopy(new)
        del undone["metadata"]["labels"]["app.kubernetes.io/name"]
        assert undone == old


def test_every_component_object_names_its_namespace(with_monitoring: list[Obj], base: list[Obj]) -> None:
    """A component cannot set a namespace for its own objects only: one without a namespace would land in
    whatever namespace the applying kubeconfig defaults to."""
    base_keys = {key(o) for o in base}
    added = [o for o in with_monitoring if key(o) not in base_keys]
    assert added and all(o["metadata"].get("namespace") for o in added)


# --- schemas --------------------------------------------------------------------------------------------------


def validate(obj: Obj, version: str) -> list[str]:
    """What is wrong with one object, by its kind's schema: a vendored CRD or Kubernetes' own."""
    if is_custom(obj):
        return custom_errors(obj, version)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [error.message]
    return []


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_of_both_builds_and_every_example_validates(
    base: list[Obj], with_monitoring: list[Obj], version: str
) -> None:
    objects = base + with_monitoring + example_objects()
    kinds = {o["kind"] for o in objects}
    assert {"PrometheusRule", "ServiceMonitor", "NodePool", "Deployment", "ConfigMap"} <= kinds
    problems = {f"{o['kind']}/{o['metadata'].get('name')}": validate(o, version) for o in objects}
    assert {name: errors for name, errors in problems.items() if errors} == {}


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = value

    return mutate


BROKEN = [
    ("ServiceMonitor", "endpoints as a string", _set("spec.endpoints", "metrics")),
    ("ServiceMonitor", "unknown scheme", _set("spec.endpoints.0.scheme", "tcp")),
    ("ServiceMonitor", "a typo in a field name", _set("spec.endpoint", [{"port": "metrics"}])),
    ("ServiceMonitor", "no selector", lambda o: o["spec"].pop("selector")),
    ("PrometheusRule", "groups as a map", _set("spec.groups", {"name": "gpupack"})),
    ("PrometheusRule", "a rule with a list for its labels", _set("spec.groups.0.rules.0.labels", ["x"])),
    ("NodePool", "unknown consolidation policy", _set("spec.disruption.consolidationPolicy", "WhenIdle")),
    ("NodePool", "consolidateAfter as a number", _set("spec.disruption.consolidateAfter", 600)),
    ("NodePool", "unknown taint effect", _set("spec.template.spec.taints.0.effect", "NoRun")),
    ("NodePool", "unknown requirement operator", _set("spec.template.spec.requirements.0.operator", "Is")),
    ("NodePool", "a label on the pool's metadata that is no string", _set("metadata.labels", {"a": 1})),
]


@pytest.mark.parametrize(("kind", "breakage", "mutate"), BROKEN, ids=[f"{k}: {b}" for k, b, _ in BROKEN])
def test_the_crd_validation_rejects_a_broken_copy(
    with_monitoring: list[Obj], kind: str, breakage: str, mutate: Callable[[Obj], None]
) -> None:
    """The check above could pass by validating nothing: each broken copy of a shipped object must fail it."""
    (good, *_) = [o for o in with_monitoring + example_objects() if o["kind"] == kind]
    assert validate(good, VERSIONS[-1]) == []
    broken = copy.deepcopy(good)
    mutate(broken)
    assert validate(broken, VERSIONS[-1]), breakage


def test_the_vendored_crds_are_the_versions_the_manifests_use() -> None:
    served = {
        (group, kind): [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
        for (group, kind), crd in crds().items()
    }
    assert served == {
        ("monitoring.coreos.com", "PrometheusRule"): ["v1"],
        ("monitoring.coreos.com", "ServiceMonitor"): ["v1"],
        ("monitoring.coreos.com", "PodMonitor"): ["v1"],
        ("karpenter.sh", "NodePool"): ["v1"],
        ("karpenter.sh", "NodeOverlay"): ["v1alpha1"],
    }


# --- scrape targets and job names -----------------------------------------------------------------------------


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against a set of labels."""
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return True
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        present, value = expression["key"] in labels, labels.get(expression["key"])
        match expression["operator"]:
            case "In" if value not in expression["values"]:
                return False
            case "NotIn" if present and value in expression["values"]:
                return False
            case "Exists" if not present:
                return False
            case "DoesNotExist" if present:
                return False
    return True


def scraped_by(monitor: Obj, services: list[Obj]) -> list[Obj]:
    """The Services a ServiceMonitor selects, in the namespaces it looks in."""
    spec = monitor["spec"]
    namespaces = spec.get("namespaceSelector", {})
    if namespaces.get("any"):
        allowed = None
    else:
        allowed = set(namespaces.get("matchNames") or [monitor["metadata"]["namespace"]])
    return [
        s
        for s in services
        if (allowed is None or s["metadata"]["namespace"] in allowed)
        and selects(spec["selector"], s["metadata"].get("labels", {}))
    ]


def test_each_servicemonitor_scrapes_one_services_metrics_port_and_never_https(with_monitoring: list[Obj]) -> None:
    services = find(with_monitoring, "Service")
    targets: dict[str, list[str]] = {}
    for monitor in find(with_monitoring, "ServiceMonitor"):
        (service,) = scraped_by(monitor, services)
        port_names = {p["name"] for p in service["spec"]["ports"]}
        endpoints = monitor["spec"]["endpoints"]
        assert all("port" in e and "targetPort" not in e for e in endpoints), "scrape by the Service's port name"
        assert {e["port"] for e in endpoints} <= port_names
        assert all(e.get("scheme", "http").lower() == "http" for e in endpoints)
        targets[service["metadata"]["name"]] = [e["port"] for e in endpoints]
    assert targets == {name: [port] for name, port in SCRAPED.items()}
    (webhook,) = find(with_monitoring, "Service", "gpupack-webhook")
    assert "https" in {p["name"] for p in webhook["spec"]["ports"]}  # there, and scraped by no one


def monitor_jobs(objects: list[Obj]) -> set[str]:
    """The job label of each ServiceMonitor's targets: the Service's name, since none sets `jobLabel` or
    relabels `job`."""
    jobs = set()
    services = find(objects, "Service")
    for monitor in find(objects, "ServiceMonitor"):
        assert "jobLabel" not in monitor["spec"]
        for endpoint in monitor["spec"]["endpoints"]:
            relabelled = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "job"]
            assert relabelled == []
        jobs |= {s["metadata"]["name"] for s in scraped_by(monitor, services)}
    return jobs


def rule_groups(objects: list[Obj]) -> list[Obj]:
    (rule,) = find(objects, "PrometheusRule", "gpupack")
    groups: list[Obj] = rule["spec"]["groups"]
    return groups


JOB_MATCHER = re.compile(r"""\bjob\s*(=~|=)\s*"([^"]*)\"""")


def gpupack_jobs_matched(groups: list[Obj]) -> set[str]:
    """Every gpupack job an expression of the rules matches (`job="gpupack-..."`, or each alternative of
    `job=~"gpupack-a|gpupack-b"`)."""
    jobs = set()
    for group in groups:
        for rule in group["rules"]:
            for operator, value in JOB_MATCHER.findall(str(rule["expr"])):
                names = value.split("|") if operator == "=~" else [value]
                jobs |= {name for name in names if name.startswith("gpupack")}
    return jobs


def test_the_rules_match_the_job_names_the_servicemonitors_give(with_monitoring: list[Obj]) -> None:
    jobs = monitor_jobs(with_monitoring)
    assert jobs == set(SCRAPED)
    assert gpupack_jobs_matched(rule_groups(with_monitoring)) == jobs


def test_the_plain_rule_file_has_the_prometheusrules_groups(with_monitoring: list[Obj]) -> None:
    plain = yaml.safe_load((PLAIN / "gpupack-rules.yaml").read_text())
    assert plain["groups"] == rule_groups(with_monitoring)


# --- the release label ----------------------------------------------------------------------------------------


def test_prometheus_objects_carry_the_default_release_label(with_monitoring: list[Obj]) -> None:
    selected = [o for o in with_monitoring if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert len(selected) == 3
    assert {o["metadata"]["labels"]["release"] for o in selected} == {"kube-prometheus-stack"}


def readme_overlay() -> str:
    """The overlay the component's README tells admins to write."""
    readme = (MONITORING / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(# your-overlay/kustomization\.yaml\n.*?)```", readme, re.S)
    return str(block)


def test_the_documented_overlay_sets_the_release_label_and_moves_the_dashboards(tmp_path: Path) -> None:
    overlay = tmp_path / "your-overlay"
    overlay.mkdir()
    to_repo = os.path.relpath(ROOT, overlay)
    (overlay / "kustomization.yaml").write_text(readme_overlay().replace("../gpupack/", f"{to_repo}/"))
    objects = build(overlay)
    selected = [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert len(selected) == 3
    assert {o["metadata"]["labels"]["release"] for o in selected} == {"my-prometheus"}
    dashboards = [o for o in objects if o["metadata"].get("labels", {}).get("grafana_dashboard")]
    assert len(dashboards) == 2 and {o["metadata"]["namespace"] for o in dashboards} == {"grafana"}


# --- dashboards -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpu-cost", "gpupack"])
def test_each_dashboard_configmap_holds_the_shipped_json_for_the_grafana_sidecar(
    with_monitoring: list[Obj], name: str
) -> None:
    (configmap,) = find(with_monitoring, "ConfigMap", f"gpupack-dashboard-{name}")
    metadata = configmap["metadata"]
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["annotations"] == {"grafana_folder": "gpupack"}
    assert list(configmap["data"]) == [f"{name}.json"]
    shipped = json.loads((MONITORING / "dashboards" / f"{name}.json").read_text())
    assert json.loads(configmap["data"][f"{name}.json"]) == shipped
    assert {"title", "uid", "panels"} <= shipped.keys()
    # A client-side `kubectl apply` keeps the whole object in an annotation of at most 256 KiB.
    assert len(json.dumps(configmap)) < 256 * 1024, "too large for a client-side apply: use --server-side"


# --- Prometheus without the operator --------------------------------------------------------------------------


def scrape_configs() -> list[Obj]:
    configs: list[Obj] = yaml.safe_load((PLAIN / "scrape-configs.yaml").read_text())["scrape_configs"]
    return configs


def promtool(config: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make system-deps` installs Debian's prometheus"
    return subprocess.run([tool, "check", "config", str(config)], capture_output=True, text=True)


def promtool_knows_kubernetes_sd(tmp_path: Path) -> bool:
    """Debian's promtool is built without Kubernetes service discovery and refuses `kubernetes_sd_configs`."""
    probe = tmp_path / "probe.yml"
    probe.write_text(
        yaml.safe_dump({"scrape_configs": [{"job_name": "p", "kubernetes_sd_configs": [{"role": "pod"}]}]})
    )
    result = promtool(probe)
    return result.returncode == 0 or "kubernetes_sd_configs not found" not in result.stdout + result.stderr


def prometheus_config(tmp_path: Path, configs: list[Obj]) -> Path:
    """A prometheus.yml with the plain rule file and these scrape configs, as the plain README says."""
    shutil.copy(PLAIN / "gpupack-rules.yaml", tmp_path / "gpupack-rules.yaml")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {"global": {"scrape_interval": "30s"}, "rule_files": ["gpupack-rules.yaml"], "scrape_configs": configs}
        )
    )
    return config


def checkable(configs: list[Obj], tmp_path: Path) -> list[Obj]:
    """The scrape configs as this promtool can check them: where it lacks Kubernetes discovery, each
    `kubernetes_sd_configs` is swapped for a static target, so promtool still checks the rest (job names,
    relabelling, paths); the discovery blocks are checked by test_the_scrape_configs_discover_..."""
    if promtool_knows_kubernetes_sd(tmp_path):
        return configs
    swapped = copy.deepcopy(configs)
    for config in swapped:
        config.pop("kubernetes_sd_configs")
        config["static_configs"] = [{"targets": ["discovered:8080"]}]
    return swapped


def test_the_scrape_configs_and_the_rule_file_pass_promtool(tmp_path: Path) -> None:
    result = promtool(prometheus_config(tmp_path, checkable(scrape_configs(), tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_refuses_a_broken_scrape_config(tmp_path: Path) -> None:
    broken = checkable(scrape_configs(), tmp_path)
    broken[0]["relabel_configs"][0]["action"] = "keepp"
    result = promtool(prometheus_config(tmp_path, broken))
    assert result.returncode != 0 and 'unknown relabel action "keepp"' in result.stdout + result.stderr


def test_the_scrape_configs_discover_gpupacks_endpoints() -> None:
    for config in scrape_configs():
        assert config["kubernetes_sd_configs"] == [{"role": "endpoints", "namespaces": {"names": [NAMESPACE]}}]
        assert (config.get("scheme"), config.get("metrics_path")) == ("http", "/metrics")


def relabel(labels: dict[str, str], rules: list[Obj]) -> dict[str, str] | None:
    """Prometheus' relabelling for the actions these configs use (keep, drop, replace); None when dropped."""
    out = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(out.get(s, "") for s in rule.get("source_labels", []))
        matched = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and not matched:
            return None
        if action == "drop" and matched:
            return None
        if action == "replace" and matched:
            out[rule["target_label"]] = matched.expand(rule.get("replacement", r"\1").replace("$1", r"\1"))
    return out


def test_the_scrape_configs_keep_what_the_servicemonitors_keep(with_monitoring: list[Obj]) -> None:
    """Every port of every Service the build ships, as Kubernetes discovery would present it: each job keeps
    its own Service's `metrics` port and nothing else, with the ServiceMonitors' target labels."""
    endpoints = [
        {
            "__meta_kubernetes_namespace": s["metadata"]["namespace"],
            "__meta_kubernetes_service_name": s["metadata"]["name"],
            "__meta_kubernetes_endpoint_port_name": p["name"],
            "__meta_kubernetes_pod_name": "pod-0",
            "__meta_kubernetes_pod_container_name": "c",
        }
        for s in find(with_monitoring, "Service")
        for p in s["spec"]["ports"]
    ]
    kept = {}
    for config in scrape_configs():
        targets = [t for t in (relabel(e, config["relabel_configs"]) for e in endpoints) if t is not None]
        (target,) = targets
        kept[config["job_name"]] = (target["service"], target["endpoint"])
        assert target["namespace"] == NAMESPACE and target["pod"] == "pod-0" and target["container"] == "c"
    assert kept == {name: (name, port) for name, port in SCRAPED.items()}
    assert set(kept) == monitor_jobs(with_monitoring)
