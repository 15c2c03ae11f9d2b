"""Run: `python -m bench.webhook [--duration S] [--connections N]` (or `make bench-webhook`).

Both servers run pinned to CPU 0 (one core, one process), one after the other; wrk runs on CPU 1 with
keep-alive TLS connections, POSTing the recorded AdmissionReview `000-mutate-llm-infer-7b-abc12.json`
(labels renamed from the recording's placeholder domain to gpupack.io/). Reported: requests/s, p50, p99,
and gpupack's throughput as a fraction of the bare server's. Targets: >= 40% and p99 < 5 ms at 16 connections.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from certs.issue import issue_ca, issue_serving_cert, write_pair

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT.parent / "shared/fixtures/recorded-k8s-1.36/admission/000-mutate-llm-infer-7b-abc12.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not start")


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(port: int, script: Path, connections: int, duration: int) -> dict[str, float]:
    cmd = [
        "taskset",
        "-c",
        "1",
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
        "-s",
        str(script),
        f"https://127.0.0.1:{port}/mutate?timeout=5s",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "non_2xx": float(errors.group(1)) if errors else 0.0,
        "socket_errors": 1.0 if socket_errors else 0.0,
    }


def measure(cmd: list[str], port: int, script: Path, connections: int, duration: int) -> dict[str, float]:
    server = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        run_wrk(port, script, connections, 2)  # warm-up
        return run_wrk(port, script, connections, duration)
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if not shutil.which("wrk") or not shutil.which("taskset"):
        print("needs wrk and taskset (Debian packages wrk, util-linux)", file=sys.stderr)
        return 2
    body = FIXTURE.read_text().replace("gpu.example.com/model-memory", "gpupack.io/gpu-memory")
    body = body.replace("gpu.example.com/", "gpupack.io/")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ca = issue_ca()
        write_pair(work, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
        script = work / "post.lua"
        script.write_text(
            f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = {json.dumps(body)}\n'
        )
        cert, key = str(work / "tls.crt"), str(work / "tls.key")
        python = sys.executable
        results = {}
        port = free_port()
        results["bare aiohttp"] = measure(
            [python, "-m", "bench.webhook.bare", str(port), cert, key], port, script, args.connections, args.duration
        )
        port = free_port()
        gpupack = [
            python,
            "-m",
            "gpupack",
            "--log-level",
            "WARNING",
            "webhook",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--cert-file",
            cert,
            "--key-file",
            key,
        ]
        results["gpupack webhook"] = measure(gpupack, port, script, args.connections, args.duration)
    ratio = results["gpupack webhook"]["rps"] / results["bare aiohttp"]["rps"]
    print(f"{'server':<18}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-2xx':>10}")
    for name, r in results.items():
        print(f"{name:<18}{r['rps']:>10.0f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}{r['non_2xx']:>10.0f}")
    p99 = results["gpupack webhook"]["p99_ms"]
    print(
        f"\ngpupack / bare throughput: {ratio:.0%} (target >= 40%); gpupack p99 {p99:.2f} ms (target < 5 ms) "
        f"at {args.connections} connections, one core, {os.cpu_count()} CPUs on this machine"
    )
    out = ROOT / "bench/results"
    out.mkdir(exist_ok=True)
    (out / "webhook.json").write_text(json.dumps({"results": results, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
