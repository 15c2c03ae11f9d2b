"""The `gpupack` command line: help texts, offline preview, certificate issuing, configuration errors."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from gpupack.cli import main
from tests.conftest import ADMISSION, RECORDED, ROOT, W, make_pod, recorded_text


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpupack", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", [[], ["webhook"], ["extender"], ["simulate"], ["mutate"], ["certs"], ["demo"]])
def test_every_command_explains_itself(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.returncode == 0 and "usage: gpupack" in result.stdout
    assert len(result.stdout.splitlines()) > 5


def test_mutate_json_previews_a_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "batch"})))
    assert main(["mutate", str(pod_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"allowed", "message", "patch", "warnings", "pod"}
    terms = out["pod"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert out["allowed"] is True and {"key": "node-type", "operator": "In", "values": ["spot"]} in [
        e for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]
    ]


def test_mutate_reads_an_admission_review_with_cluster_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    review = tmp_path / "review.json"
    review.write_text(recorded_text(ADMISSION / "000-mutate-llm-infer-7b-abc12.json"))
    policy = tmp_path / "policy.yaml"
    policy.write_text("classes: {inference: {priorityClassName: gpu-inference-high}}")
    code = main(
        [
            "mutate",
            str(review),
            "--config",
            str(policy),
            "--json",
            "--priority-classes",
            str(RECORDED / "priorityclasses.json"),
            "--nodes",
            str(RECORDED / "nodes.json"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["pod"]["spec"]["priority"] == 100000
    assert out["pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-2g.10gb"] == "1"


def test_mutate_of_an_invalid_pod_reports_denied(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "gaming"})))
    result = run("mutate", str(pod_file))
    assert result.returncode == 1 and "DENIED" in result.stdout and "gpupack.io/workload" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [("kind: Service\n", "expected a Pod or an AdmissionReview"), ("- 1\n", "must hold one"), ("a: [\n", "not YAML")],
)
def test_mutate_rejects_other_documents_clearly(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    result = run("mutate", str(path))
    assert result.returncode == 2 and message in result.stderr


def test_certs_issue_the_service_names_and_print_the_ca_bundle(tmp_path: Path) -> None:
    result = run("certs", "--out", str(tmp_path), "--service", "gpupack-webhook", "--ip", "127.0.0.1")
    assert result.returncode == 0
    assert base64.b64decode(result.stdout.strip()) == (tmp_path / "ca.crt").read_bytes()
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "gpupack-webhook",
        "gpupack-webhook.gpupack-system",
        "gpupack-webhook.gpupack-system.svc",
    ]
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    again = run("certs", "--out", str(tmp_path), "--dns", "x")
    assert again.stdout == result.stdout  # the CA is reused: the caBundle stays valid


def test_mutate_names_a_cluster_list_file_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    assert main(["mutate", str(pod_file), "--priority-classes", str(pod_file.with_name("pcs.yaml"))]) == 2
    assert "pcs.yaml" in capsys.readouterr().err  # unreadable: OSError names it
    (tmp_path / "pcs.yaml").write_text("items: []\n")
    assert main(["mutate", str(pod_file), "--priority-classes", str(tmp_path / "pcs.yaml")]) == 2
    assert f"{tmp_path / 'pcs.yaml'}: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--days", "0"], "--days: 0 must be at least 1"), (["--dns", "bad name!"], "not a DNS name")],
)
def test_certs_refuse_a_validity_or_name_no_certificate_should_carry(
    tmp_path: Path, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["certs", "--out", str(tmp_path), *flags])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "tls.crt").exists()


def test_webhook_refuses_to_start_with_an_invalid_policy(tmp_path: Path, tls_dir: Path) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text("mode: yolo\n")
    result = run(
        "webhook",
        "--config",
        str(policy),
        "--cert-file",
        str(tls_dir / "tls.crt"),
        "--key-file",
        str(tls_dir / "tls.key"),
    )
    assert result.returncode == 2 and "mode" in result.stderr and "bad.yaml" in result.stderr


def test_webhook_refuses_to_start_without_readable_certificates(tmp_path: Path) -> None:
    result = run("webhook", "--cert-file", str(tmp_path / "no.crt"), "--key-file", str(tmp_path / "no.key"))
    assert result.returncode == 2 and "gpupack webhook:" in result.stderr


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    result = run("demo", "--workdir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "DENIED" in out and "nvidia.com/mig-2g.10gb" in out  # sized to what the embedded A100s advertise
    assert "gpupack-scheduler leading (its Lease renewed)" in out  # the embedded webhook reads a live Lease
    routed = out.count("   scheduler: default-scheduler -> gpupack-scheduler")
    assert routed >= 15 and f"placement by the gpupack extender ({routed} GPU pods on gpupack-scheduler" in out
    placed = dict(re.findall(r"^   (\S+)\s+-> (\S+)", out, re.MULTILINE))
    assert placed["bert-batch-x1"] == "t4-spot-1"  # batch requires spot
    assert not placed["llm-7b"].startswith(("h100-spot", "t4-spot"))  # inference never on spot
    assert placed["llm-7b"] == placed["llm-7b-b"] == "a100-mig-1"  # packed onto the A100 already in use
    empty = re.search(r"GPU nodes left empty\s+(\d+)\s+(\d+)", out)
    assert empty is not None and int(empty.group(2)) > int(empty.group(1))  # gpupack leaves more to remove
    # the last step: gpupack report on a week of the nodes' nvidia-smi logs, offline
    assert "do not add GPUs; share, schedule and scale down first" in out and "Savings with gpupack" in out
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "idle-node" in page


def test_simulate_prints_the_json_report_and_draws_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "alloc.png"
    assert main(["simulate", "--policy", "bestfit", "--seeds", "1", "--json", "--plot", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    bestfit = report["policies"]["bestfit"]
    assert bestfit["seeds"] == 1
    assert set(bestfit["at"]) == {"100", "130"}
    assert set(bestfit["at"]["130"]) == {"alloc_pct", "unallocated_gpus", "frag_ratio", "idle_nodes"}
    assert 92.0 < bestfit["at"]["130"]["alloc_pct"] < 94.5  # published: 93.08
    assert png.read_bytes().startswith(b"\x89PNG")


def test_simulate_names_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--policy", "nope"]) == 2
    assert "unknown policy nope" in capsys.readouterr().err
    assert main(["simulate", "--trace", str(tmp_path)]) == 2
    assert "download cluster-trace-gpu-v2023" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--scale", "0.5"], "--scale cannot be used with the trace replay"),
        (
            ["--scenario", str(ROOT / "scenarios/synthetic-day.yaml"), "--policy", "fgd", "--seeds", "0"],
            "--policy, --seeds",
        ),
        (["--plot", "alloc"], "name it FILE.png"),  # matplotlib would write alloc.png
        (["--plot", "/nonexistent/dir/alloc.png"], "/nonexistent/dir is not a directory this user can write to"),
    ],
)
def test_simulate_refuses_flags_it_would_ignore_or_a_plot_it_could_not_write_before_running(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_simulate_prints_its_results_before_drawing_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,1000,1,1000\np1,2000,1000,1,500\n")

    def disk_full(*_: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr("gpupack.simulator.cli.plot", disk_full)
    code = main(
        ["simulate", "--variant", str(pods), "--policy", "bestfit", "--seeds", "1", "--plot", str(tmp_path / "a.png")]
    )
    out, err = capsys.readouterr()
    assert code == 2 and "No space left on device" in err
    assert "bestfit" in out  # the run's table survived the failed plot


def test_simulate_refuses_a_scale_that_is_not_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--scenario", str(ROOT / "scenarios/synthetic-day.yaml"), "--scale", "nan"])
    assert "nan must be a number greater than zero" in capsys.readouterr().err


def test_simulate_a_synthetic_day(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(ROOT / "scenarios/synthetic-day.yaml")
    assert main(["simulate", "--scenario", scenario, "--scale", "0.5", "--hours", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["scale"], out["hours"]) == (0.5, 6.0)
    assert list(out["policies"]) == ["none", "spread", "gpupack"]  # the numbers themselves are tested in test_day.py
    assert out["policies"]["gpupack"]["gpu_nodes_mean"] < out["policies"]["spread"]["gpu_nodes_mean"]


def _lease_file(tmp_path: Path, renewed_at: float, duration: int = 15, name: str = "gpupack-scheduler") -> Path:
    from gpupack.demo.cluster import leader_lease

    path = tmp_path / "lease.json"
    path.write_text(json.dumps(leader_lease("gpupack-system", name, renewed_at, duration=duration)))
    return path


def test_mutate_without_a_lease_assumes_the_gpupack_scheduler_is_live_and_says_so(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    result = run("mutate", str(pod_file))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[1] == (
        "scheduler: gpupack-scheduler assumed live (no --lease given; the webhook reads lease "
        "gpupack-system/gpupack-scheduler)"
    )
    assert "schedulerName: gpupack-scheduler" in result.stdout  # the mutated pod


@pytest.mark.parametrize(
    ("age", "duration", "line", "scheduler"),
    [
        (
            0,
            3600,
            "scheduler: gpupack-scheduler live (lease gpupack-system/gpupack-scheduler held and renewed)",
            "gpupack-scheduler",
        ),
        (
            3600,
            15,
            "scheduler: gpupack-scheduler has no live leader (lease gpupack-system/gpupack-scheduler: expired",
            "default-scheduler",
        ),
    ],
)
def test_mutate_with_a_lease_routes_as_the_webhook_would_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], age: int, duration: int, line: str, scheduler: str
) -> None:
    import time

    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    lease = _lease_file(tmp_path, time.time() - age, duration)
    assert main(["mutate", str(pod_file), "--lease", str(lease)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(line)
    assert main(["mutate", str(pod_file), "--lease", str(lease), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"allowed", "message", "patch", "warnings", "pod"}  # the documented shape, unchanged
    assert out["pod"]["spec"]["schedulerName"] == scheduler


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (json.dumps(make_pod()), "--lease: expected a Lease, got kind 'Pod'"),
        ("[]", "must hold a Lease object"),
        ("not json", "not JSON"),
    ],
)
def test_mutate_refuses_a_lease_file_that_is_not_a_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    (tmp_path / "lease.json").write_text(content)
    assert main(["mutate", str(pod_file), "--lease", str(tmp_path / "lease.json")]) == 2
    assert message in capsys.readouterr().err


def test_mutate_says_when_routing_is_off(tmp_path: Path) -> None:
    pod_file, policy = tmp_path / "pod.json", tmp_path / "policy.yaml"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    policy.write_text("scheduler: {name: null}\n")
    result = run("mutate", str(pod_file), "--config", str(policy))
    assert (
        result.stdout.splitlines()[1] == "scheduler: routing off (scheduler.name is null): schedulerName is left alone"
    )
    assert "schedulerName: default-scheduler" in result.stdout


def test_mutate_refuses_a_lease_other_than_the_policys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(make_pod({W + "workload": "inference"})))
    lease = _lease_file(tmp_path, 0, name="kube-scheduler")
    assert main(["mutate", str(pod_file), "--lease", str(lease)]) == 2
    err = capsys.readouterr().err
    assert (
        "lease gpupack-system/kube-scheduler is not the policy's scheduler.lease gpupack-system/gpupack-scheduler"
        in err
    )
