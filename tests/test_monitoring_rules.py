"""The shipped rules: generated from `gpupack.monitoring.rules`, valid for promtool, and pinned by `promtool test rules`
files that fire each alert just past its threshold and keep it silent just short of it. A threshold changed in a
copy of the rules makes those tests fail: they test the numbers, not only the shapes."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupack.monitoring import build
from gpupack.monitoring.rules import alert_names, groups
from gpupack.monitoring.thresholds import DEFAULT, AlertThresholds

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted((ROOT / "tests" / "monitoring").glob("*.test.yaml"))
PROMETHEUS_RULE = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"
"""The kustomize component's PrometheusRule, rendered from the chart by charts/generate.py."""
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
ALERTS = [
    "GPUNodeHot",
    "GPUPodsPending",
    "GPUMemoryHeldIdle",
    "MIGInstanceNearOOM",
    "GPUXidErrors",
    "GPUNodeIdle",
    "GPUNodeUnderused",
    "GpupackWebhookDown",
    "GpupackWebhookErrors",
    "GpupackWebhookSlow",
    "GpupackExtenderDown",
    "GpupackExtenderMetricsStale",
    "GpupackPolicyReloadFailed",
    "GpupackCertificateExpiringSoon",
    "GpupackSchedulerUnrouted",
]
"""The issue's names, which admins grep for."""
COVERS = {
    "gpu.test.yaml": ("hot", "hot_for", "pending_for", "held_memory", "held_compute", "held_for", "mig_near_oom",
                      "mig_near_oom_for", "xid_window"),
    "weekly.test.yaml": ("idle", "underused", "week", "week_history"),
    "gpupack.test.yaml": ("down_for", "error_window", "slow_seconds", "slow_for", "stale_for", "certificate_days"),
}  # fmt: skip
"""Which test file pins each threshold."""

needs_promtool = pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="no promtool (`make test` installs prometheus)")


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=300, check=False)


def test_the_shipped_files_are_what_the_source_writes() -> None:
    for path, text in build.outputs().items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `python -m gpupack.monitoring`"


def test_the_plain_rule_file_and_the_prometheusrule_hold_the_same_groups() -> None:
    plain = yaml.safe_load(build.RULE_FILE.read_text())
    operator = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert operator["kind"] == "PrometheusRule" and operator["spec"]["groups"] == plain["groups"] == groups()


def test_the_alerts_are_the_issues_names_each_with_what_an_admin_needs() -> None:
    assert sorted(alert_names()) == sorted(ALERTS)
    for group in groups():
        for rule in group["rules"]:
            if "alert" not in rule:
                assert re.fullmatch(r"gpupack:[a-z_0-9]+(:[a-z_0-9]+)?", rule["record"]), rule["record"]
                continue
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            annotations = rule["annotations"]
            assert set(annotations) == {"summary", "description", "runbook_url"}
            # the page it names is checked in the built site: tests/test_docs_site.py
            assert annotations["runbook_url"].endswith(f"/operations/runbooks/{rule['alert'].lower()}/")


@needs_promtool
def test_promtool_checks_the_rule_files(tmp_path: Path) -> None:
    done = _promtool("check", "rules", build.RULE_FILE)
    assert done.returncode == 0 and "SUCCESS: 24 rules found" in done.stdout, done.stdout + done.stderr
    spec = tmp_path / "from-prometheusrule.yaml"
    spec.write_text(yaml.safe_dump({"groups": yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"]}))
    assert _promtool("check", "rules", spec).returncode == 0


@needs_promtool
@pytest.mark.parametrize("test_file", TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    done = _promtool("test", "rules", test_file)
    assert done.returncode == 0, done.stdout + done.stderr


def _cases() -> dict[str, dict[str, int]]:
    """Per alert, how many evaluations expect it firing and how many expect it silent."""
    out: dict[str, dict[str, int]] = {}
    for path in TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                counts = out.setdefault(case["alertname"], {"firing": 0, "silent": 0})
                counts["firing" if case.get("exp_alerts") else "silent"] += 1
    return out


def test_every_alert_is_tested_firing_and_silent() -> None:
    cases = _cases()
    for alert in ALERTS:
        assert cases.get(alert, {}).get("firing", 0) >= 1, f"{alert} is never tested firing"
        assert cases.get(alert, {}).get("silent", 0) >= 1, f"{alert} is never tested silent"


def test_every_threshold_is_pinned_by_a_test_file() -> None:
    pinned = {name for names in COVERS.values() for name in names}
    assert pinned == {f.name for f in dataclasses.fields(AlertThresholds)}
    assert set(COVERS) == {p.name for p in TESTS}


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(duration[:-1]) * units[duration[-1]]


def _mutated(factors: dict[str, float]) -> AlertThresholds:
    """The default thresholds with each named one times its factor (durations written in seconds)."""
    changed: dict[str, Any] = {}
    for name, factor in factors.items():
        value = getattr(DEFAULT, name)
        changed[name] = f"{_seconds(value) * factor:g}s" if isinstance(value, str) else value * factor
    return dataclasses.replace(DEFAULT, **changed)


def _with_default_text(mutated: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The mutated rules with the default rules' annotations: a test must fail on what fires, not on a number
    quoted in a description."""
    for group, default in zip(mutated, groups(), strict=True):
        for rule, original in zip(group["rules"], default["rules"], strict=True):
            if "annotations" in rule:
                rule["annotations"] = original["annotations"]
    return mutated


def _run_mutated(tmp_path: Path, test_file: str, factors: dict[str, float]) -> subprocess.CompletedProcess[str]:
    """`test_file` against the rules built with each named threshold times its factor, in a copy of the layout."""
    root = tmp_path / "-".join(f"{name}-{factor:g}" for name, factor in sorted(factors.items()))
    rules = root / "manifests" / "monitoring" / "prometheus" / "gpupack-rules.yaml"
    rules.parent.mkdir(parents=True)
    rules.write_text(yaml.safe_dump({"groups": _with_default_text(groups(_mutated(factors)))}, width=1 << 20))
    tests = root / "tests" / "monitoring"
    tests.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "monitoring" / test_file, tests / test_file)
    return _promtool("test", "rules", tests / test_file)


@needs_promtool
@pytest.mark.parametrize("test_file", COVERS)
def test_the_copied_layout_passes_with_its_thresholds_rewritten_unchanged(tmp_path: Path, test_file: str) -> None:
    """The mutated copies below fail because of the changed threshold, not because of the copy: with every
    threshold the file pins rewritten at factor 1 (durations in seconds), the copy passes."""
    done = _run_mutated(tmp_path, test_file, dict.fromkeys(COVERS[test_file], 1.0))
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
@pytest.mark.parametrize(("test_file", "name"), [(f, n) for f, names in COVERS.items() for n in names])
def test_a_changed_threshold_fails_the_tests(tmp_path: Path, test_file: str, name: str) -> None:
    """Each threshold 20 % lower and 20 % higher (durations 25 %: a test's boundary is a minute either side).
    That the unchanged copy passes is checked once per file, above."""
    factors = (0.75, 1.25) if isinstance(getattr(DEFAULT, name), str) else (0.8, 1.2)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda f: _run_mutated(tmp_path, test_file, {name: f}), factors))
    for factor, done in zip(factors, runs, strict=True):
        assert done.returncode != 0, f"{test_file} still passes with {name} x {factor:g}"
        assert "FAILED" in done.stdout + done.stderr
