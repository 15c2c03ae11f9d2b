"""Run: `python -m bench.webhook [--duration S] [--connections N] [--rate R]` (or `make bench-webhook`).

Both servers run pinned to CPU 0 (one core, one process), one after the other; wrk runs on CPU 1 with
keep-alive TLS connections, POSTing the recorded AdmissionReview `000-mutate-llm-infer-7b-abc12.json`
(labels renamed from the recording's placeholder domain to gpupack.io/). Each server gets two runs:

saturation  every connection sends its next request as soon as the answer arrives: the most the server can
            do (requests/s) and its latency when the queue is always full. gpupack's throughput is reported
            as a fraction of the bare server's, measured in the same run. Target: >= 40%.
paced       the same connections at a fixed total rate (`--rate`, 1,000 req/s by default): each waits
            `connections / rate` seconds on average (wrk's `delay()`, exponentially distributed so that the
            connections do not send in lockstep) after an answer before sending again. This is the latency an
            admission sees when the webhook is busy but not overloaded. Target: p99 < 5 ms.

Why two runs: wrk is closed-loop. With N connections at saturation, Little's law fixes the mean latency at
N / throughput (16 connections at 2,000 req/s is 8 ms whatever the code does), so a latency target is only
meaningful at an offered rate below saturation. The paced run is still closed-loop: wrk measures from the
moment a request is written, and a connection stuck on a slow answer sends nothing meanwhile, so stalls are
counted once instead of for every request that would have been sent during them (coordinated omission).
Its p99 is a lower bound of what an open-loop client (wrk2, the API server) would see; the pause after each
answer also makes the achieved rate slightly lower than `--rate` (it is reported).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.net import free_port, wait_port
from bench.wrk import read_report
from certs.issue import issue_ca, issue_serving_cert, write_pair
from gpupack.argtypes import positive_float, positive_int

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT.parent / "shared/fixtures/recorded-k8s-1.36/admission/000-mutate-llm-infer-7b-abc12.json"


def wrk_script(body: str, delay_ms: float | None = None) -> str:
    """A wrk Lua script POSTing `body`; with `delay_ms`, each connection pauses that long on average between requests.

    The pause is drawn from an exponential distribution (mean `delay_ms`), so requests arrive like independent pod
    creations (close to a Poisson process). A fixed pause would keep all connections in lockstep from their common
    start: bursts of `connections` requests at once, whose last one waits for the other 15 (16 x 0.4 ms = 6.4 ms of
    queue at an average load of 40%), which measures wrk's schedule rather than the server. wrk truncates `delay()`
    to whole milliseconds; adding a uniform [0, 1) before truncating keeps the mean.
    """
    script = f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = {json.dumps(body)}\n'
    if delay_ms is not None:
        script += (
            "function delay()\n"
            f"  return math.floor(-{delay_ms:.4f} * math.log(1 - math.random()) + math.random())\n"
            "end\n"
        )
    return script


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
    return read_report(out)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; taskset execs the server, so the pid is its)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    cmd: list[str], port: int, scripts: dict[str, Path], connections: int, duration: int
) -> dict[str, dict[str, float]]:
    """Start one server on CPU 0, warm it up, then run wrk with each script in turn: {script name: result}.

    Each result also has `cpu_us`: the server's CPU time (user + system) per request. Unlike requests/s, it
    hardly moves when another process shares the machine, so it tells a code change from noise.
    """
    server = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        run_wrk(port, scripts["saturation"], connections, 2)  # warm-up
        results = {}
        for name, script in scripts.items():
            before = cpu_seconds(server.pid)
            results[name] = run_wrk(port, script, connections, duration)
            results[name]["cpu_us"] = (cpu_seconds(server.pid) - before) / results[name]["requests"] * 1e6
        return results
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=positive_int, default=10, help="seconds of each measured run (default 10)")
    parser.add_argument("--connections", type=positive_int, default=16)
    parser.add_argument(
        "--rate", type=positive_float, default=1000.0, help="total req/s of the paced run (default 1000)"
    )
    args = parser.parse_args()
    if not shutil.which("wrk") or not shutil.which("taskset"):
        print("needs wrk and taskset (Debian packages wrk, util-linux)", file=sys.stderr)
        return 2
    body = FIXTURE.read_text().replace("gpu.example.com/model-memory", "gpupack.io/gpu-memory")
    body = body.replace("gpu.example.com/", "gpupack.io/")
    delay_ms = args.connections / args.rate * 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ca = issue_ca()
        write_pair(work, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
        scripts = {"saturation": work / "post.lua", "paced": work / "paced.lua"}
        scripts["saturation"].write_text(wrk_script(body))
        scripts["paced"].write_text(wrk_script(body, delay_ms))
        cert, key = str(work / "tls.crt"), str(work / "tls.key")
        python = sys.executable
        results = {}
        port = free_port()
        results["bare aiohttp"] = measure(
            [python, "-m", "bench.webhook.bare", str(port), cert, key], port, scripts, args.connections, args.duration
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
        results["gpupack webhook"] = measure(gpupack, port, scripts, args.connections, args.duration)
    ratio = results["gpupack webhook"]["saturation"]["rps"] / results["bare aiohttp"]["saturation"]["rps"]
    print(f"{'':<18}{'saturation':^42}{f'paced, {args.rate:g} req/s offered':^30}")
    print(f"{'server':<18}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'CPU µs/req':>12}", end="")
    print(f"{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-2xx':>10}")
    for name, runs in results.items():
        sat, paced = runs["saturation"], runs["paced"]
        print(
            f"{name:<18}{sat['rps']:>10.0f}{sat['p50_ms']:>10.2f}{sat['p99_ms']:>10.2f}{sat['cpu_us']:>12.0f}"
            f"{paced['rps']:>10.0f}{paced['p50_ms']:>10.2f}{paced['p99_ms']:>10.2f}"
            f"{sat['non_2xx'] + paced['non_2xx']:>10.0f}"
        )
    p99 = results["gpupack webhook"]["paced"]["p99_ms"]
    print(
        f"\ngpupack / bare throughput at saturation: {ratio:.0%} (target >= 40%); gpupack p99 at "
        f"{args.rate:g} req/s: {p99:.2f} ms (target < 5 ms); {args.connections} connections, server on one core, "
        f"{os.cpu_count()} CPUs on this machine"
    )
    cpu_bare, cpu_gpupack = (results[n]["saturation"]["cpu_us"] for n in ("bare aiohttp", "gpupack webhook"))
    print(f"by server CPU per request: {cpu_bare / cpu_gpupack:.0%} ({cpu_gpupack:.0f} µs vs {cpu_bare:.0f} µs)")
    out = ROOT / "bench/results"
    out.mkdir(exist_ok=True)
    summary = {
        "results": results,
        "ratio": ratio,
        "cpu_ratio": cpu_bare / cpu_gpupack,
        "rate": args.rate,
        "connections": args.connections,
    }
    (out / "webhook.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
