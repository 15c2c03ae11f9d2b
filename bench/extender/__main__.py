"""Run: `python -m bench.extender [--duration S] [--connections N] [--rate R] [--data DIR] [--tls]`
(or `make bench-extender`).

A generated cluster of 5,000 nodes (8 GPUs each: MIG, time-sliced and whole) and 150,000 bound pods, with a
DCGM exporter snapshot for all 40,000 GPUs (`bench.extender.cluster`), is loaded by `gpupack extender
--kubeconfig --metrics-file` the production way: paginated lists from a minimal API server in its own process
(`bench.extender.apiserver`), then open watches. The same ExtenderArgs bodies (6 kinds of pending pods, 500
node names each, plus one body whose names are drawn from every node) are POSTed to it and to a bare aiohttp
handler that only parses them (`bench.extender.bare`). Both servers run pinned to CPU 0; wrk runs on CPU 1.

Measured per server and verb:
  - saturation throughput (wrk, `--connections` connections, `--duration` s) and gpupack's fraction of the bare
    server's (target >= 50%): `--rounds` rounds, each a run on the bare server then one on gpupack, both up;
    the median of the rounds' ratios (the machine's speed drifts between runs minutes apart);
  - latency at a fixed rate (`--rate` req/s per verb; each connection waits connections/rate between requests
    with wrk's `delay()`, so wrk stays closed-loop: a stall delays later requests instead of queueing them)
    (target p99 <= 10 ms), and both verbs together as the scheduler calls them, `--rate` pods/s;
  - VmRSS (and VmHWM, the peak) of the server after loading the state (target <= 600 MB);
  - CPU the idle server burns in the background (live-metrics refresh), over 5 s;
  - the preempt verb's latency at `--preempt-rate` calls/s, each ExtenderPreemptionArgs naming `--candidates`
    nodes with up to two victims each (target p99 <= 1 s, half the shipped httpTimeout). By default as many as
    kube-scheduler's dry run finds with its defaults (`scheduler_candidates`: 500 of 5,000 nodes); `--candidates
    5000` sends every node, far more than kube-scheduler ever does.
Then, in-process on CPU 0: the watch cache absorbing 150,000 pod ADDED events and 150,000 MODIFIED / DELETED
events (JSON lines decoded with orjson, then `extender.changes.apply_events`), against a baseline of the same
decodes and dict stores (target >= 5,000 events/s).

Results: a table on stdout and bench/results/extender.json.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.extender.cluster import Cluster, generate, pod_items, preemption_bodies, request_bodies
from bench.wrk import read_report
from gpupack.core.argtypes import positive_float, positive_int
from gpupack.testing.net import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/results"
SERVER_CPU, CLIENT_CPU = "0", "1"
TARGET_P99_MS, TARGET_RATIO, TARGET_RSS_MB, TARGET_EVENTS = 10.0, 0.5, 600.0, 5000.0
TARGET_PREEMPT_P99_MS = 1000.0
"""Half the shipped `httpTimeout` (2 s): a preempt call is made once per preemption."""
MIN_CANDIDATE_NODES_PERCENTAGE, MIN_CANDIDATE_NODES_ABSOLUTE = 10, 100
"""DefaultPreemption's `minCandidateNodesPercentage` and `minCandidateNodesAbsolute` defaults (kube-scheduler v1.36,
`pkg/scheduler/apis/config/v1/defaults.go`)."""


def scheduler_candidates(nodes: int) -> int:
    """How many candidates kube-scheduler's dry run looks for, and so at most sends the preempt verb, with its
    default DefaultPreemption arguments (`calculateNumCandidates`): 10 % of the nodes, at least 100, at most all."""
    return min(max(nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE), nodes)


VERBS = ("filter", "prioritize")


# servers ---------------------------------------------------------------------------------------------------------


class Server:
    """A server process pinned to CPU 0."""

    def __init__(self, name: str, cmd: list[str], port: int, scheme: str = "http") -> None:
        self.name, self.port, self.scheme = name, port, scheme
        self.base = f"{scheme}://127.0.0.1:{port}"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *cmd], stdout=subprocess.DEVNULL)
        self.ready_after = 0.0

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Poll GET /readyz until it answers 200."""
        context = _insecure() if self.scheme == "https" else None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=1, context=context) as reply:
                    if reply.status == 200:
                        self.ready_after = time.monotonic() - self.started
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s")

    def status_kb(self, field: str) -> float:
        """A field of /proc/PID/status, in kB."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        return float(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))  # type: ignore[union-attr]

    def cpu_seconds(self) -> float:
        """utime + stime of the process (all threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def post(self, path: str, body: bytes) -> Any:
        context = _insecure() if self.scheme == "https" else None
        request = urllib.request.Request(
            f"{self.base}{path}", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return orjson.loads(reply.read())

    def get(self, path: str) -> str:
        context = _insecure() if self.scheme == "https" else None
        with urllib.request.urlopen(f"{self.base}{path}", timeout=10, context=context) as reply:
            return str(reply.read().decode())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _insecure() -> Any:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


# wrk ---------------------------------------------------------------------------------------------------------------
def lua_script(bodies: list[bytes], paths: list[str], delay_ms: float | None) -> str:
    """Rotate through the bodies; for each body, POST it to each path in turn; optionally pace each connection."""
    longs = ",\n".join(f"[==[{b.decode()}]==]" for b in bodies)
    paths_lua = ", ".join(f'"{p}"' for p in paths)
    script = f"""
local bodies = {{
{longs}
}}
local paths = {{ {paths_lua} }}
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = bodies[(math.floor(n / #paths) % #bodies) + 1]
  local path = paths[(n % #paths) + 1]
  n = n + 1
  return wrk.format(nil, path, nil, body)
end
"""
    if delay_ms is not None:
        script += f"delay = function() return {delay_ms:g} end\n"
    return script


def run_wrk(server: Server, script: Path, connections: int, duration: float) -> dict[str, float]:
    cmd = [
        "taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--timeout", "5s",
        "--latency", "-s", str(script), f"{server.base}/",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    try:
        return read_report(out)
    except ValueError as exc:
        raise RuntimeError(f"cannot read wrk's output ({exc}):\n{out}") from exc


def _reason_kind(reason: str) -> str:
    for pattern, kind in (("spot node", "spot"), ("offers no", "no-resource"), ("free, pod needs", "insufficient")):
        if pattern in reason:
            return kind
    return "hot" if "hot threshold" in reason else reason[:30]


def check_answers(server: Server, bodies: list[bytes]) -> dict[str, Any]:
    """Every body once per verb: errors, and what gpupack decided (nodes passed, failed, score spread)."""
    passed = failed = errors = 0
    reasons: dict[str, int] = {}
    scores: dict[str, int] = {}
    for body in bodies:
        result = server.post("/filter", body)
        if result.get("Error"):
            errors += 1
        passed += len(result.get("NodeNames") or [])
        for reason in [
            *(result.get("FailedNodes") or {}).values(),
            *(result.get("FailedAndUnresolvableNodes") or {}).values(),
        ]:
            failed += 1
            kind = _reason_kind(reason)
            reasons[kind] = reasons.get(kind, 0) + 1
        ranked = server.post("/prioritize", body)
        if not ranked:
            errors += 1
        for entry in ranked:
            scores[str(entry["Score"])] = scores.get(str(entry["Score"]), 0) + 1
    return {
        "errors": errors,
        "passed": passed,
        "failed": failed,
        "reasons": reasons,
        "scores": dict(sorted(scores.items(), key=lambda s: int(s[0]))),
    }


def saturation(
    bare: Server, gpupack: Server, scripts: dict[str, Path], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Saturation throughput of both servers, interleaved: `--rounds` rounds of (bare, gpupack) per verb.

    This machine's speed drifts by tens of percent over a minute (a shared host). Measuring the two servers
    minutes apart put that drift into the ratio; each round's two runs are seconds apart, and the median of the
    rounds' ratios is reported with its range.
    """
    out: dict[str, dict[str, Any]] = {}
    for verb in VERBS:
        rounds: list[dict[str, dict[str, float]]] = []
        for _ in range(args.rounds):
            round_: dict[str, dict[str, float]] = {}
            for server, other in ((bare, gpupack), (gpupack, bare)):
                before, other_before = server.cpu_seconds(), other.cpu_seconds()
                run = run_wrk(server, scripts[f"{verb}-saturation"], args.connections, args.duration)
                run["cpu_ms_per_request"] = 1000 * (server.cpu_seconds() - before) / max(run["requests"], 1)
                # the idle server shares CPU 0: what it burns meanwhile is taken from the one measured
                run["other_cpu_pct"] = 100 * (other.cpu_seconds() - other_before) / args.duration
                round_[server.name] = run
            rounds.append(round_)
        ratios = sorted(r["gpupack"]["rps"] / r["bare"]["rps"] for r in rounds)
        by_cpu = sorted(r["bare"]["cpu_ms_per_request"] / r["gpupack"]["cpu_ms_per_request"] for r in rounds)
        out[verb] = {
            "rounds": rounds,
            "ratios": ratios,
            "ratio": statistics.median(ratios),
            "cpu_ratios": by_cpu,
            "cpu_ratio": statistics.median(by_cpu),
        }
    return out


def settle(server: Server, timeout: float) -> float | None:
    """Wait until the server burns under 10% of a core over 2 s (background work done); None after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = server.cpu_seconds()
        time.sleep(2)
        if server.cpu_seconds() - before < 0.2:
            return round(time.monotonic() - started, 1)
    return None


def measure_server(
    server: Server,
    scripts: dict[str, Path],
    bodies: list[bytes],
    args: argparse.Namespace,
    first: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Readiness, RSS, idle CPU, answers, `first` (the saturation rounds, while the live data is as fresh as at
    startup), then the paced wrk runs."""
    server.wait_ready()
    out: dict[str, Any] = {"ready_after_s": round(server.ready_after, 1)}
    out["rss_mb"] = server.status_kb("VmRSS") / 1024
    out["peak_rss_mb"] = server.status_kb("VmHWM") / 1024
    before = server.cpu_seconds()
    time.sleep(5)
    out["idle_cpu_pct"] = 100 * (server.cpu_seconds() - before) / 5
    out["settled_after_s"] = settle(server, args.settle)
    out["answers"] = check_answers(server, bodies)
    run_wrk(server, scripts["both-saturation"], args.connections, args.warmup)  # steady state, not first calls
    first()
    runs: dict[str, dict[str, float]] = {}
    for verb in VERBS:
        runs[f"{verb} @{args.rate:g}/s"] = run_wrk(server, scripts[f"{verb}-paced"], args.connections, args.duration)
    runs[f"both @{args.rate:g} pods/s"] = run_wrk(server, scripts["both-paced"], args.connections, args.duration)
    runs[f"preempt @{args.preempt_rate:g}/s"] = run_wrk(server, scripts["preempt-paced"], 1, args.duration)
    out["runs"] = runs
    out["rss_after_mb"] = server.status_kb("VmRSS") / 1024
    if server.name == "gpupack":
        metrics = server.get("/metrics")
        stale = re.search(r"^gpupack_extender_metrics_stale (\S+)", metrics, re.M)
        pods = re.search(r"^gpupack_extender_pods_cached (\S+)", metrics, re.M)
        nodes = re.search(r"^gpupack_extender_nodes_cached (\S+)", metrics, re.M)
        out["metrics_stale"] = float(stale.group(1)) if stale else None
        out["pods_cached"] = float(pods.group(1)) if pods else None
        out["nodes_cached"] = float(nodes.group(1)) if nodes else None
    return out


# the watch cache ---------------------------------------------------------------------------------------------------
def _event_lines(pods: list[dict[str, Any]], seed: int) -> tuple[list[bytes], list[bytes]]:
    """150,000 ADDED lines, then as many MODIFIED (status update, or finished) or DELETED ones, shuffled."""
    rng = random.Random(seed)
    added = [orjson.dumps({"type": "ADDED", "object": pod}) for pod in pods]
    changed: list[bytes] = []
    for pod in pods:
        draw = rng.random()
        if draw < 0.3:
            changed.append(orjson.dumps({"type": "DELETED", "object": pod}))
            continue
        updated = dict(pod)
        meta = dict(pod["metadata"])
        meta["resourceVersion"] = str(rng.getrandbits(30))
        updated["metadata"] = meta
        if draw < 0.45:
            updated["status"] = dict(pod["status"], phase="Succeeded")
        changed.append(orjson.dumps({"type": "MODIFIED", "object": updated}))
    rng.shuffle(changed)
    return added, changed


def measure_events(cluster: Cluster, batch: int = 1000) -> dict[str, Any]:
    """In this process, pinned to CPU 0: decode + apply each event, in the informer's batches."""
    from gpupack.extender.changes import apply_events
    from gpupack.extender.demand import RequestsCache

    cache = RequestsCache()  # the informer keeps one
    from gpupack.core.policy import Policy
    from gpupack.extender.service import load_lists
    from gpupack.extender.state import ClusterState

    pods = pod_items(cluster)
    added, changed = _event_lines(pods, seed=3)
    del pods
    policy = Policy()
    nodes = orjson.loads(cluster.nodes_file.read_bytes())["items"]
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(SERVER_CPU)})
    try:
        measured = f"orjson.loads + {apply_events.__module__}.apply_events" + (" + RequestsCache" if cache else "")
        out: dict[str, Any] = {"events_per_phase": len(added), "measured": measured}
        state = ClusterState()
        load_lists(state, nodes, [], policy)
        for phase, lines in (("added", added), ("modified/deleted", changed)):
            started = time.perf_counter()
            for i in range(0, len(lines), batch):
                events = [orjson.loads(line) for line in lines[i : i + batch]]
                if cache is None:
                    apply_events(state, "pods", events, policy)
                else:
                    apply_events(state, "pods", events, policy, cache)
            out[f"gpupack {phase} events/s"] = len(lines) / (time.perf_counter() - started)
            out[f"pods cached after {phase}"] = len(state.pods)
        store: dict[str, Any] = {}
        for phase, lines in (("added", added), ("modified/deleted", changed)):
            started = time.perf_counter()
            for i in range(0, len(lines), batch):
                for event in [orjson.loads(line) for line in lines[i : i + batch]]:
                    key = event["object"]["metadata"]["uid"]
                    if event["type"] == "DELETED":
                        store.pop(key, None)
                    else:
                        store[key] = event["object"]
            out[f"bare {phase} events/s"] = len(lines) / (time.perf_counter() - started)
    finally:
        os.sched_setaffinity(0, affinity)
    total = 2 * len(added)
    gp = total / sum(len(added) / out[f"gpupack {p} events/s"] for p in ("added", "modified/deleted"))
    bare = total / sum(len(added) / out[f"bare {p} events/s"] for p in ("added", "modified/deleted"))
    out["gpupack events/s"], out["bare events/s"], out["ratio"] = gp, bare, gp / bare
    return out


# main --------------------------------------------------------------------------------------------------------------
def _status(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    servers = results["servers"]
    print(f"\ncluster: {results['cluster']}")
    for name, s in servers.items():
        a = s["answers"]
        print(
            f"{name}: ready after {s['ready_after_s']}s, "
            f"CPU in the 5 s after ready {s['idle_cpu_pct']:.0f}% of a core, "
            f"idle after {'never' if s['settled_after_s'] is None else s['settled_after_s']} s more, "
            f"answers: {a['errors']} errors, {a['passed']} passed / {a['failed']} filtered {a['reasons']}, "
            f"scores {a['scores']}"
        )
    gp = servers["gpupack"]
    print(f"(settle timeout {args.settle:g} s)")
    if "metrics_stale" in gp:
        print(f"gpupack /metrics: nodes {gp['nodes_cached']}, pods {gp['pods_cached']}, stale {gp['metrics_stale']}")
    print(f"\n{'server':<9}{'run':<24}{'req/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    for name, s in servers.items():
        for run, r in s["runs"].items():
            errors = r["non_2xx"] + r["socket_errors"]
            print(
                f"{name:<9}{run:<24}{r['rps']:>9.1f}{r['p50_ms']:>9.2f}{r['p90_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                f"{r['max_ms']:>9.2f}{errors:>8.0f}"
            )
    print(f"\nsaturation, {args.rounds} interleaved rounds of {args.duration:g} s per server (req/s, bare / gpupack):")
    for verb, sat in results["saturation"].items():
        pairs = ", ".join(f"{r['bare']['rps']:.0f} / {r['gpupack']['rps']:.0f}" for r in sat["rounds"])
        ratios = ", ".join(f"{x:.0%}" for x in sat["ratios"])
        idle = max(r["bare"]["other_cpu_pct"] for r in sat["rounds"])
        cpu = ", ".join(
            f"{r['bare']['cpu_ms_per_request']:.3f} / {r['gpupack']['cpu_ms_per_request']:.3f}" for r in sat["rounds"]
        )
        by_cpu = ", ".join(f"{x:.0%}" for x in sat["cpu_ratios"])
        print(f"  {verb:<11} {pairs}   ratios {ratios}   (gpupack idle during bare runs: <= {idle:.1f}% of CPU 0)")
        print(f"  {'':<11} CPU ms per request {cpu}   ratios by CPU {by_cpu}")
    print(f"\n{'target':<52}{'measured':>22}  result")
    for target, measured, ok in results["checks"]:
        print(f"{target:<52}{measured:>22}  {_status(ok)}")
    ev = results["events"]
    if "ratio" not in ev:
        return
    print(
        f"\nwatch cache ({ev['measured']}, batches of 1,000): added {ev['gpupack added events/s']:,.0f}/s, "
        f"modified/deleted {ev['gpupack modified/deleted events/s']:,.0f}/s; bare decode + dict store "
        f"{ev['bare events/s']:,.0f}/s"
    )
    print(
        f"one core per process ({os.cpu_count()} CPUs on this machine); wrk -t1 -c{args.connections} -d{args.duration}s"
    )


def checks(results: dict[str, Any], rate: float) -> list[tuple[str, str, bool]]:
    gp = results["servers"]["gpupack"]
    out = []
    for verb in VERBS:
        p99 = gp["runs"][f"{verb} @{rate:g}/s"]["p99_ms"]
        out.append((f"{verb} p99 at {rate:g} req/s <= {TARGET_P99_MS:g} ms", f"{p99:.2f} ms", p99 <= TARGET_P99_MS))
    for verb in VERBS:
        sat = results["saturation"][verb]
        ratio, low, high = sat["ratio"], sat["ratios"][0], sat["ratios"][-1]
        measured = f"{ratio:.0%} ({low:.0%}-{high:.0%})"
        out.append((f"{verb} throughput >= {TARGET_RATIO:.0%} of bare (median)", measured, ratio >= TARGET_RATIO))
    bare_preempt = results["servers"]["bare"]["runs"]
    run = f"preempt @{results['settings']['preempt_rate']:g}/s"
    p99 = gp["runs"][run]["p99_ms"]
    baseline = bare_preempt[run]["p99_ms"]
    p50, bare_p50 = gp["runs"][run]["p50_ms"], bare_preempt[run]["p50_ms"]
    out.append((
        f"preempt p99 at {results['cluster']['preempt_candidates']:,} candidates <= {TARGET_PREEMPT_P99_MS:g} ms",
        f"{p99:.1f} ms (bare {baseline:.1f}; p50 {p50:.1f}, bare {bare_p50:.1f})",
        p99 <= TARGET_PREEMPT_P99_MS,
    ))  # fmt: skip
    rss = max(gp["rss_mb"], gp["rss_after_mb"])
    out.append(
        (f"gpupack RSS <= {TARGET_RSS_MB:g} MB", f"{rss:.0f} MB (peak {gp['peak_rss_mb']:.0f})", rss <= TARGET_RSS_MB)
    )
    events = results["events"]["gpupack events/s"]
    out.append((f"watch cache >= {TARGET_EVENTS:,.0f} pod events/s", f"{events:,.0f}/s", events >= TARGET_EVENTS))
    stale = gp.get("metrics_stale")
    out.append(("live GPU data fresh to the end", "stale" if stale else "fresh", not stale))
    errors = sum(r["non_2xx"] + r["socket_errors"] for s in results["servers"].values() for r in s["runs"].values())
    errors += sum(
        r["non_2xx"] + r["socket_errors"]
        for sat in results["saturation"].values()
        for round_ in sat["rounds"]
        for r in round_.values()
    )
    errors += gp["answers"]["errors"]
    out.append(("no errors, no non-2xx", f"{errors:.0f}", errors == 0))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=positive_float, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=positive_int, default=3, help="interleaved saturation rounds per verb")
    parser.add_argument(
        "--warmup", type=float, default=10, help="seconds of both verbs at saturation on each server before measuring"
    )
    parser.add_argument("--connections", type=positive_int, default=4)
    parser.add_argument("--rate", type=positive_float, default=100.0, help="requests/s per verb in the latency runs")
    parser.add_argument("--nodes", type=positive_int, default=5000)
    parser.add_argument("--pods", type=positive_int, default=150_000)
    parser.add_argument("--names", type=positive_int, default=500, help="node names per ExtenderArgs")
    parser.add_argument(
        "--candidates",
        type=positive_int,
        help="candidate nodes per preempt call (default: as many as kube-scheduler's dry run finds, 10 %% of nodes)",
    )
    parser.add_argument("--preempt-rate", type=positive_float, default=2.0, help="preempt calls/s in its latency run")
    parser.add_argument("--data", type=Path, help="write the generated cluster here (kept), not in a temp dir")
    parser.add_argument("--tls", action="store_true", help="serve both over HTTPS (default plain HTTP)")
    parser.add_argument(
        "--config", type=Path, help="policy file for gpupack (default: samples fresh for an hour, see _fresh_policy)"
    )
    parser.add_argument(
        "--settle", type=float, default=60, help="wait up to S seconds after /readyz for the server to go idle"
    )
    parser.add_argument("--skip-events", action="store_true", help="skip the in-process watch cache measurement")
    args = parser.parse_args()
    if not shutil.which("wrk") or not shutil.which("taskset"):
        print("needs wrk and taskset (Debian packages wrk, util-linux)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = args.data or work / "cluster"
        started = time.monotonic()
        cluster = generate(data, args.nodes, args.pods)
        generated = time.monotonic() - started
        bodies = request_bodies(cluster, args.names)
        candidates = args.candidates or scheduler_candidates(len(cluster.nodes))
        preempting = preemption_bodies(cluster, candidates)
        scripts: dict[str, Path] = {}
        paced_delay = args.connections * 1000 / args.rate
        for verb in VERBS:
            scripts[f"{verb}-saturation"] = work / f"{verb}-saturation.lua"
            scripts[f"{verb}-saturation"].write_text(lua_script(bodies, [f"/{verb}"], None))
            scripts[f"{verb}-paced"] = work / f"{verb}-paced.lua"
            scripts[f"{verb}-paced"].write_text(lua_script(bodies, [f"/{verb}"], paced_delay))
        scripts["both-saturation"] = work / "both-saturation.lua"
        scripts["both-saturation"].write_text(lua_script(bodies, ["/filter", "/prioritize"], None))
        scripts["both-paced"] = work / "both-paced.lua"
        scripts["both-paced"].write_text(lua_script(bodies, ["/filter", "/prioritize"], paced_delay / 2))
        scripts["preempt-paced"] = work / "preempt-paced.lua"
        scripts["preempt-paced"].write_text(lua_script(preempting, ["/preempt"], 1000 / args.preempt_rate))
        tls: list[str] = []
        scheme = "http"
        if args.tls:
            from gpupack.certs.issue import issue_ca, issue_serving_cert, write_pair

            ca = issue_ca()
            write_pair(work, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
            tls, scheme = ["--cert-file", str(work / "tls.crt"), "--key-file", str(work / "tls.key")], "https"
        python = sys.executable
        results: dict[str, Any] = {
            "cluster": {
                "nodes": len(cluster.nodes),
                "pods": cluster.pod_count,
                "gpus": cluster.gpu_count,
                "dcgm_series": cluster.series,
                "pods_json_mb": round(cluster.pods_file.stat().st_size / 2**20),
                "dcgm_txt_mb": round(cluster.metrics_file.stat().st_size / 2**20),
                "request_bodies": len(bodies),
                "body_kb": round(sum(map(len, bodies)) / len(bodies) / 1024, 1),
                "preempt_candidates": min(candidates, len(cluster.nodes)),
                "preempt_body_kb": round(sum(map(len, preempting)) / len(preempting) / 1024, 1),
                "generated_s": round(generated, 1),
            },
            "settings": {
                "connections": args.connections,
                "duration_s": args.duration,
                "rounds": args.rounds,
                "warmup_s": args.warmup,
                "rate": args.rate,
                "paced_delay_ms": paced_delay,
                "preempt_rate": args.preempt_rate,
                "tls": args.tls,
                "config": str(args.config) if args.config else f"maxAgeSeconds: {FRESH_FOR_SECONDS}",
            },
            "servers": {},
        }
        port = free_port()
        bare = Server("bare", [python, "-m", "bench.extender.bare", str(port), *tls[1::2]], port, scheme)
        try:
            results["servers"]["bare"] = measure_server(bare, scripts, bodies, args)
            gp, results["saturation"] = _measure_gpupack(bare, cluster, scripts, bodies, args, tls, scheme)
            results["servers"]["gpupack"] = gp
        finally:
            bare.stop()
        if args.skip_events:
            results["events"] = {"measured": "skipped", "gpupack events/s": float("nan")}
        else:
            results["events"] = measure_events(cluster)
    results["checks"] = checks(results, args.rate)
    report(results, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "extender.json").write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    return 0


FRESH_FOR_SECONDS = 3600


def _fresh_policy(folder: Path) -> Path:
    """The default policy, but with DCGM samples counting as fresh for an hour.

    The snapshot's samples carry no timestamp, so they are as old as the file; with the default 120 s they would
    go stale part-way through the runs (load scores turning neutral, every cached verdict expiring at once), which
    a Prometheus that keeps scraping never does. `--config` replaces this file.
    """
    path = folder / "bench-policy.yaml"
    path.write_text(f"extender:\n  metrics:\n    maxAgeSeconds: {FRESH_FOR_SECONDS}\n")
    return path


def _measure_gpupack(
    bare: Server,
    cluster: Cluster,
    scripts: dict[str, Path],
    bodies: list[bytes],
    args: argparse.Namespace,
    tls: list[str],
    scheme: str,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Start the API server and gpupack (loading the cluster the production way) and measure it; then both servers'
    saturation throughput, interleaved (the bare server is still up)."""
    python = sys.executable
    port = free_port()
    os.utime(cluster.metrics_file)  # samples without a timestamp are as old as the file
    api_port = free_port()
    api = subprocess.Popen(
        ["taskset", "-c", "1", python, "-m", "bench.extender.apiserver", str(api_port),
         str(cluster.nodes_file), str(cluster.pods_file)]
    )  # fmt: skip
    kubeconfig = cluster.nodes_file.parent / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: b, cluster: {{server: 'http://127.0.0.1:{api_port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: b, user: u}}]\ncurrent-context: c\n"
    )
    wait_port(api_port)
    gpupack = Server(
        "gpupack",
        [
            python, "-m", "gpupack", "--log-level", "WARNING", "extender",
            "--kubeconfig", str(kubeconfig),
            "--metrics-file", str(cluster.metrics_file), "--host", "127.0.0.1", "--port", str(port), *tls,
            "--config", str(args.config or _fresh_policy(cluster.nodes_file.parent)),
        ],
        port,
        scheme,
    )  # fmt: skip
    rounds: dict[str, dict[str, Any]] = {}
    try:
        measured = measure_server(
            gpupack, scripts, bodies, args, lambda: rounds.update(saturation(bare, gpupack, scripts, args))
        )
        return measured, rounds
    finally:
        gpupack.stop()
        api.kill()
        api.wait(10)


if __name__ == "__main__":
    sys.exit(main())
