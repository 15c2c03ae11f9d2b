"""The Helm chart, rendered: `helm lint`, every object of every value set valid by the Kubernetes schemas and the
vendored CRDs, probes and ports that reach a listener, the policy and the namespace where the code expects them,
values refused by values.schema.json with their name, and the kustomize base under manifests/ exactly what the
chart renders for it (charts/generate.py). The chart on a real API server: test_helm_real.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpupack.certs.issue import webhook_sans
from gpupack.core.policy import parse_policy
from tests.chart_kit import CA_BUNDLE, CHART, NS, VALUE_SETS, find, helm_template, is_hook, render, sets
from tests.conftest import ROOT
from tests.crd_kit import custom_errors, is_custom
from tests.test_manifest_ports import listeners, problems_of

VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
CERT_MANAGER = "cert-manager.io/v1"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {case: render(*sets(case)) for case in VALUE_SETS}


def kustomize(folder: str) -> list[Obj]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / folder)], check=True, capture_output=True, text=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def policy_of(objects: list[Obj]) -> Any:
    (configmap,) = find(objects, "ConfigMap", "gpupack-policy")
    return parse_policy(configmap["data"]["policy.yaml"].encode())


# --- helm lint and the schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_helm_lint_passes_strictly(case: str) -> None:
    argv = ["helm", "lint", "--strict", str(CHART), "--namespace", NS]
    for value in sets(case):
        argv += ["--set", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def validate(obj: Obj, version: str) -> list[str]:
    if is_custom(obj):
        return custom_errors(obj, version)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [error.message]
    return []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_every_rendered_object_validates(rendered: dict[str, list[Obj]], case: str, version: str) -> None:
    """Core kinds by Kubernetes' schemas, PrometheusRule and ServiceMonitor by the vendored CRDs. cert-manager's
    CRDs are not vendored (tests/fixtures/crds/README.md): test_cert_manager_... checks what its objects say."""
    objects = [o for o in rendered[case] if o["apiVersion"] != CERT_MANAGER]
    assert len(objects) >= 20
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate(o, version) for o in objects}
    assert {name: errors for name, errors in problems.items() if errors} == {}


@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_every_probe_port_and_service_reaches_a_listener(rendered: dict[str, list[Obj]], case: str) -> None:
    assert problems_of(rendered[case]) == []


@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_the_webhook_registrations_call_the_services_tls_port(rendered: dict[str, list[Obj]], case: str) -> None:
    """Each registration's Service port is a port of that Service whose target is the webhook's TLS listener."""
    objects = rendered[case]
    (config,) = [o for o in find(objects, "MutatingWebhookConfiguration") if not is_hook(o)]
    (deployment,) = find(objects, "Deployment", "gpupack-webhook")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    tls = {listener.port for listener in listeners(container) if listener.tls}
    for hook in config["webhooks"]:
        called = hook["clientConfig"]["service"]
        services = [
            o for o in find(objects, "Service", called["name"]) if o["metadata"]["namespace"] == called["namespace"]
        ]
        ports = [p for s in services for p in s["spec"]["ports"] if p["port"] == called.get("port", 443)]
        assert len(ports) == 1, f"{hook['name']} calls {called}, which is no port of a rendered Service"
        target = ports[0]["targetPort"]
        targets = [c["containerPort"] for c in container["ports"] if target in (c["name"], c["containerPort"])]
        assert targets and set(targets) <= tls, (hook["name"], ports[0])


REFUSED = [
    (["policy.mod=audit"], "at '/policy': additional properties 'mod' not allowed"),
    (["policy.classes.inference.spot=maybe"], "at '/policy/classes/inference/spot': value must be one of"),
    (["policy.extender.hotThreshold=2"], "at '/policy/extender/hotThreshold'"),
    (["policy.classes.gpu.cpu=1"], "at '/policy/classes': additional properties 'gpu' not allowed"),
    (["policy.scheduler.pollSeconds=soon"], "at '/policy/scheduler/pollSeconds': got string, want number"),
    (["webhook.replicas=two"], "at '/webhook/replicas': got string, want integer"),
    (["scheduler.mode=third"], "at '/scheduler/mode': value must be one of 'second', 'main'"),
    (["scheduler.name=default-scheduler"], "at '/scheduler/name'"),
    (["monitoring.enable=true"], "at '/monitoring': additional properties 'enable' not allowed"),
    (["imag.tag=1"], "additional properties 'imag' not allowed"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED, ids=[v[0] for v, _ in REFUSED])
def test_a_wrong_type_or_an_unknown_field_fails_with_its_name(values: list[str], message: str) -> None:
    done = helm_template(*values, f"certificates.webhook.caBundle={CA_BUNDLE}", check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "certificates.webhook.caBundle: give the caBundle `gpupack certs` printed"),
        ([f"certificates.webhook.caBundle={CA_BUNDLE}", "policy.gpupackNamespace=x"], "policy: leave out"),
        ([f"certificates.webhook.caBundle={CA_BUNDLE}", "policy.scheduler.name=x"], "policy: leave out"),
    ],
)
def test_what_the_chart_writes_itself_is_refused_in_the_values(values: list[str], message: str) -> None:
    done = helm_template(*values, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_documented_policy_example_passes_the_schema_and_the_model(tmp_path: Path) -> None:
    """The policy page's example, as the chart's `policy` value: accepted by values.schema.json (a class given
    partly is complete: the model keeps the defaults of what it omits) and by the policy model."""
    page = (ROOT / "docs" / "admins" / "policy.md").read_text()
    example = page.split("## Examples")[1].split("```yaml\n")[1].split("```")[0]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"policy": yaml.safe_load(example)}))
    objects = render(f"certificates.webhook.caBundle={CA_BUNDLE}", values_file=values)
    assert policy_of(objects) == parse_policy(example.encode())


# --- what the objects say -----------------------------------------------------------------------------------------


def test_the_default_policy_is_audit_and_routes_to_the_second_scheduler(rendered: dict[str, list[Obj]]) -> None:
    policy = policy_of(rendered["defaults"])
    assert policy == parse_policy(b"mode: audit")
    (deployment,) = find(rendered["defaults"], "Deployment", "gpupack-scheduler")
    (config_map,) = find(rendered["defaults"], "ConfigMap", "gpupack-scheduler-config")
    config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert config["profiles"] == [{"schedulerName": policy.scheduler.name}]
    assert (config["leaderElection"]["resourceNamespace"], config["leaderElection"]["resourceName"]) == (
        policy.scheduler.lease.namespace,
        policy.scheduler.lease.name,
    )
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {"checksum/scheduler-config"}  # a changed configuration rolls kube-scheduler


def test_another_namespace_and_scheduler_name_reach_every_object_and_the_policy(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["another namespace and scheduler name"]
    policy = policy_of(objects)
    assert (policy.mode, policy.gpupack_namespace, policy.scheduler.name) == ("enforce", "gpu-cost", "packer")
    assert (policy.scheduler.lease.namespace, policy.scheduler.lease.name) == ("gpu-cost", "gpupack-scheduler")
    assert find(objects, "Namespace", "gpu-cost")
    cluster_scoped = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, obj["metadata"]
        elif obj["metadata"]["name"] != "gpupack-scheduler-extension-apiserver-authentication-reader":
            assert namespace == "gpu-cost", obj["metadata"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "gpu-cost"
    (config,) = [o for o in find(objects, "MutatingWebhookConfiguration") if not is_hook(o)]
    for hook in config["webhooks"]:
        assert hook["clientConfig"]["service"]["namespace"] == "gpu-cost"
        assert hook["clientConfig"]["caBundle"] == CA_BUNDLE
        assert {"kube-system", "gpu-cost"} <= set(hook["namespaceSelector"]["matchExpressions"][0]["values"])
    (scheduler_config,) = find(objects, "ConfigMap", "gpupack-scheduler-config")
    scheduler = yaml.safe_load(scheduler_config["data"]["scheduler-config.yaml"])
    assert scheduler["profiles"] == [{"schedulerName": "packer"}]
    assert scheduler["leaderElection"]["resourceNamespace"] == "gpu-cost"


@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_every_object_carries_the_charts_labels_and_images_the_app_version(
    rendered: dict[str, list[Obj]], case: str
) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for obj in rendered[case]:
        labels = obj["metadata"].get("labels", {})
        assert {label: labels.get(label) for label in HELM_LABELS} == {
            "helm.sh/chart": f"gpupack-{chart['version']}",
            "app.kubernetes.io/managed-by": "Helm",
            "app.kubernetes.io/instance": "gpupack",
        }, obj["metadata"]
    images = {
        c["image"]
        for d in find(rendered[case], "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["image"].startswith("ghcr.io/gpupack/")
    }
    assert images == {f"ghcr.io/gpupack/gpupack:{chart['appVersion']}"}


def test_the_image_values_reach_the_containers() -> None:
    objects = render(
        "image.repository=registry.example/gpupack",
        "image.tag=dev",
        "image.pullPolicy=Always",
        f"certificates.webhook.caBundle={CA_BUNDLE}",
    )
    containers = [c for d in find(objects, "Deployment") for c in d["spec"]["template"]["spec"]["containers"]]
    ours = [c for c in containers if c["name"] != "kube-scheduler"]
    assert {(c["image"], c["imagePullPolicy"]) for c in ours} == {("registry.example/gpupack:dev", "Always")}


@pytest.mark.parametrize("folder", ["manifests", "overlays/with-monitoring"])
def test_the_kustomize_base_has_none_of_helms_labels(folder: str) -> None:
    for obj in kustomize(folder):
        labels = obj["metadata"].get("labels", {})
        assert not [label for label in labels if label in HELM_LABELS or label.startswith("helm.sh/")], obj["metadata"]
        assert not is_hook(obj)


def test_custom_mig_profiles_reach_the_main_schedulers_managed_resources(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    profiles = [
        {"name": "1g.10gb", "memory": "10Gi", "computeSlices": 1},
        {"name": "3g.40gb", "memory": "40Gi", "computeSlices": 3},
    ]
    values.write_text(
        yaml.safe_dump({"policy": {"migProfiles": profiles, "timeSlicing": {"resourceName": "nvidia.com/gpu.replica"}}})
    )
    objects = render(f"certificates.webhook.caBundle={CA_BUNDLE}", "scheduler.mode=main", values_file=values)
    (snippet,) = find(objects, "ConfigMap", "gpupack-scheduler-extender")
    (extender,) = yaml.safe_load(snippet["data"]["extenders.yaml"])["extenders"]
    policy = policy_of(objects)
    expected = ["nvidia.com/gpu", "nvidia.com/gpu.replica", *(p.resource for p in policy.mig_profiles)]
    assert [r["name"] for r in extender["managedResources"]] == expected


# --- the main scheduler's mode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["main-scheduler", "cert-manager, main scheduler"])
def test_the_main_scheduler_mode_runs_the_extender_alone_behind_tls_with_client_certificates(
    rendered: dict[str, list[Obj]], case: str
) -> None:
    objects = rendered[case]
    assert policy_of(objects).scheduler.name is None  # no routing, no Lease read
    assert not find(objects, "Deployment", "gpupack-scheduler") and not find(objects, "Lease")
    assert not [o for o in objects if "lease" in o["metadata"]["name"] or "leader" in o["metadata"]["name"]]
    (deployment,) = find(objects, "Deployment", "gpupack-extender")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    verbs, health = listeners(container)
    assert verbs.on_pod_ip and verbs.tls and health.on_pod_ip and not health.tls
    args = dict(a.split("=", 1) for a in container["args"][1:])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    for flag, key in (("--cert-file", "tls.crt"), ("--key-file", "tls.key"), ("--client-ca-file", "ca.crt")):
        folder, _, file = args[flag].rpartition("/")
        assert file == key and volumes[mounts[folder]]["secret"]["secretName"] == "gpupack-extender-tls"
    (service,) = find(objects, "Service", "gpupack-extender")
    assert service["spec"]["ports"] == [{"name": "https", "port": 8888, "targetPort": "https", "protocol": "TCP"}]
    (snippet,) = find(objects, "ConfigMap", "gpupack-scheduler-extender")
    (extender,) = yaml.safe_load(snippet["data"]["extenders.yaml"])["extenders"]
    assert extender["urlPrefix"] == f"https://gpupack-extender.{NS}.svc:8888"
    assert set(extender["tlsConfig"]) == {"certFile", "keyFile", "caFile"}
    (second,) = find(render(*sets("defaults")), "ConfigMap", "gpupack-scheduler-config")
    (sidecar,) = yaml.safe_load(second["data"]["scheduler-config.yaml"])["extenders"]
    # the same entry, but that the main scheduler calls it only for GPU pods: the second one gets only those
    assert {k: v for k, v in extender.items() if k not in ("urlPrefix", "tlsConfig", "managedResources")} == {
        k: v for k, v in sidecar.items() if k != "urlPrefix"
    }
    policy = policy_of(objects)
    expected = {"nvidia.com/gpu", policy.time_slicing.resource_name} | {p.resource for p in policy.mig_profiles}
    assert {r["name"] for r in extender["managedResources"]} == expected
    assert "managedResources" not in sidecar


def test_the_servicemonitors_follow_the_extender_in_either_mode(rendered: dict[str, list[Obj]]) -> None:
    for case in ("monitoring", "monitoring, main scheduler"):
        objects = rendered[case]
        (monitor,) = find(objects, "ServiceMonitor", "gpupack-extender")
        selected = [
            s["metadata"]["name"]
            for s in find(objects, "Service")
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert selected == ["gpupack-extender-metrics"], case
        assert {
            o["metadata"]["labels"]["release"] for o in objects if o["kind"] in ("ServiceMonitor", "PrometheusRule")
        } == {"kube-prometheus-stack"}


def test_the_dashboards_and_rules_are_the_generated_files(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["monitoring"]
    for stem in ("gpu-cost", "gpupack"):
        (configmap,) = find(objects, "ConfigMap", f"gpupack-dashboard-{stem}")
        assert configmap["data"] == {f"{stem}.json": (CHART / "files/dashboards" / f"{stem}.json").read_text()}
        assert configmap["metadata"]["namespace"] == "monitoring"
    (rule,) = find(objects, "PrometheusRule", "gpupack")
    plain = yaml.safe_load((ROOT / "manifests/monitoring/prometheus/gpupack-rules.yaml").read_text())
    assert rule["spec"] == plain


# --- certificates -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["cert-manager", "cert-manager, main scheduler"])
def test_cert_manager_issues_the_secrets_the_pods_mount_and_injects_the_webhooks_ca(
    rendered: dict[str, list[Obj]], case: str
) -> None:
    objects = rendered[case]
    certificates = {c["metadata"]["name"]: c for c in find(objects, "Certificate")}
    issuers = {i["metadata"]["name"] for i in find(objects, "Issuer")}
    (config,) = [o for o in find(objects, "MutatingWebhookConfiguration") if not is_hook(o)]
    namespace, _, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].partition("/")
    assert namespace == NS and all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    mounted = {
        v["secret"]["secretName"]
        for d in find(objects, "Deployment")
        for v in d["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    served = {c["spec"]["secretName"] for c in certificates.values() if "server auth" in c["spec"].get("usages", [])}
    assert mounted == served and certificates[name]["spec"]["secretName"] == "gpupack-webhook-tls"
    assert set(certificates[name]["spec"]["dnsNames"]) == set(webhook_sans("gpupack-webhook", NS))
    for certificate in certificates.values():
        assert certificate["spec"]["issuerRef"]["name"] in issuers
    if case.endswith("main scheduler"):
        client = certificates["gpupack-scheduler-client"]["spec"]
        assert client["usages"] == ["client auth"] and client["issuerRef"] == {"kind": "Issuer", "name": "gpupack-ca"}


def test_an_issuer_of_ones_own_replaces_the_charts_ca() -> None:
    objects = render("certificates.certManager.enabled=true", "certificates.certManager.issuerRef.kind=ClusterIssuer",
                     "certificates.certManager.issuerRef.name=corp-ca")  # fmt: skip
    assert not find(objects, "Issuer") and find(objects, "Certificate")
    assert {json.dumps(c["spec"]["issuerRef"]) for c in find(objects, "Certificate")} == {
        json.dumps({"kind": "ClusterIssuer", "name": "corp-ca"})
    }


def test_uninstall_removes_the_webhook_registration_first(rendered: dict[str, list[Obj]]) -> None:
    """Helm deletes kinds it does not know, MutatingWebhookConfiguration among them, last: the pre-delete hook
    of the same name deletes the registration before anything else (test_helm_real.py checks it on a cluster)."""
    (hook,) = [o for o in find(rendered["defaults"], "MutatingWebhookConfiguration") if is_hook(o)]
    annotations = hook["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    assert hook["metadata"]["name"] == "gpupack" and hook["webhooks"] == []


# --- one source: the kustomize base and the chart's generated files -----------------------------------------------


def test_the_kustomize_base_and_the_charts_generated_files_are_what_the_chart_renders(tmp_path: Path) -> None:
    """charts/generate.py into a temporary folder: every file it writes equals the repository's, so the chart and
    manifests/ cannot drift apart (nor Chart.yaml's version from pyproject.toml's, nor the policy's schema from
    the model)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "charts" / "generate.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written = [Path(line) for line in done.stdout.split()]
    assert {p.parts[0] for p in written} == {"charts", "manifests"} and len(written) >= 20
    stale = [str(p) for p in written if (tmp_path / p).read_text() != (ROOT / p).read_text()]
    assert stale == [], f"stale (run `make manifests`): {stale}"
    listed = yaml.safe_load((ROOT / "manifests/kustomization.yaml").read_text())
    generated = {p.relative_to("manifests").as_posix() for p in written if p.parts[0] == "manifests"}
    assert set(listed["resources"]) <= generated
    assert {f for g in listed["configMapGenerator"] for f in g["files"]} <= generated


def test_every_value_the_documentation_sets_is_one_of_the_charts() -> None:
    """The `--set name=...` examples of the README and the docs site name values the chart has (values.yaml lists
    every one)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {name for page in pages for name in re.findall(r"--set ([A-Za-z.]+)=", page.read_text())}
    assert {"certificates.webhook.caBundle", "policy.mode", "scheduler.mode", "monitoring.enabled"} <= named
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for name in named:
        node: Any = defaults
        for part in name.split("."):
            if name.startswith("policy."):
                break  # the policy's fields are the model's (values.schema.json)
            assert isinstance(node, dict) and part in node, f"README sets {name}, which the chart does not have"
            node = node[part]


def test_the_dra_objects_render_where_asked_and_validate() -> None:
    """`dra.migDeviceClasses` renders one DeviceClass per MIG profile of the policy; `dra.claimTemplateNamespaces`
    the ResourceClaimTemplates of `dra.memorySizing` into each namespace. Off by default."""
    assert not [
        o for o in render(f"certificates.webhook.caBundle={CA_BUNDLE}") if o["apiVersion"].startswith("resource.")
    ]
    objects = render(
        f"certificates.webhook.caBundle={CA_BUNDLE}",
        "dra.migDeviceClasses=true",
        "dra.claimTemplateNamespaces={ml-a,ml-b}",
    )
    classes = find(objects, "DeviceClass")
    policy = policy_of(objects)
    assert {c["spec"]["extendedResourceName"] for c in classes} == {p.resource for p in policy.mig_profiles}
    templates = find(objects, "ResourceClaimTemplate")
    assert sorted({t["metadata"]["namespace"] for t in templates}) == ["ml-a", "ml-b"]
    assert len(templates) == 2 * len({p.memory for p in policy.mig_profiles})
    for obj in [*classes, *templates]:
        assert validate(obj, kubernetes_validate.latest_version()) == [], obj["metadata"]["name"]
