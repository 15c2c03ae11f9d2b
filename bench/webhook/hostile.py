"""Run: `python -m bench.webhook.hostile` (or `make bench-hostile`): the webhook against hostile and careless
clients, as a real process, beside the bare aiohttp TLS server (`bench.webhook.bare`) in the same run.

Memory: the resident set of each server before, while and after holding 600 plain TCP connections that never
start the TLS handshake, and 1,000 idle TLS connections; and whether an admission is still answered meanwhile.
Targets: the webhook stays far under its 256 Mi container limit and returns to within 10 MB of its start after
the connections close (the bare server shows what asyncio alone does: 256 KiB per connection, kept).

Stalls: a prober sends one small admission every 10 ms on its own keep-alive connection and records each
latency, while the largest review of each shape (`gpupack.testing.shapes`, 3 MiB each) is sent, and while the
policy file is replaced by a 1 MiB policy the webhook must parse. Targets: every large review answered within
~250 ms, and no prober admission delayed by more than ~50 ms beyond its median, by either.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from gpupack.certs.issue import issue_ca, issue_serving_cert, write_pair
from gpupack.core.admitted import admitted_pod
from gpupack.core.argtypes import positive_int
from gpupack.testing.net import free_port, wait_port
from gpupack.testing.pods import review
from gpupack.testing.shapes import ALL_SHAPES, largest

LABELLED = {"gpupack.io/workload": "inference"}


def rss_mb(pid: int) -> float:
    """Resident set size of a process (Linux /proc), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Server:
    """One server process under test."""

    name: str
    cmd: list[str]
    port: int
    proc: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        time.sleep(1.0)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def admit(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, float]:
    """Status and latency (ms) of one POST."""
    started = time.monotonic()
    async with session.post(url, data=body) as response:
        await response.read()
        return response.status, (time.monotonic() - started) * 1000


async def idle_connections(server: Server, context: ssl.SSLContext, count: int, tls: bool) -> dict[str, float]:
    """RSS before, while `count` idle connections are open, and after they close; an admission meanwhile."""
    before = rss_mb(server.proc.pid)
    held = []
    for _ in range(count):
        if tls:
            held.append(await asyncio.open_connection("127.0.0.1", server.port, ssl=context))
        else:
            held.append(await asyncio.open_connection("127.0.0.1", server.port))
    await asyncio.sleep(1.0)
    during = rss_mb(server.proc.pid)
    body = orjson.dumps(review(admitted_pod("probe", dict(LABELLED))))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        try:
            status, latency = await asyncio.wait_for(admit(session, f"https://127.0.0.1:{server.port}/mutate", body), 5)
        except (TimeoutError, aiohttp.ClientError):
            status, latency = 0, float("nan")
    for _, writer in held:
        writer.close()
    await asyncio.sleep(7.0)  # the webhook trims freed memory every 5 s
    return {"before": before, "during": during, "after": rss_mb(server.proc.pid), "status": status, "ms": latency}


async def probe(url: str, ca_file: str, seconds: float, interval: float = 0.01) -> list[tuple[float, float]]:
    """Small admissions every `interval` seconds on one keep-alive connection for `seconds`: (monotonic start
    time, latency ms) of each. It runs in a process of its own (`--probe`), so that the benchmark's own work
    (building and sending 3 MiB bodies) never delays a probe."""
    context = ssl.create_default_context(cafile=ca_file)
    body = orjson.dumps(review(admitted_pod("probe", dict(LABELLED))))
    samples: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1)) as session:
        while time.monotonic() < end:
            started = time.monotonic()
            _status, latency = await admit(session, url, body)
            samples.append((started, latency))
            await asyncio.sleep(max(0.0, interval - latency / 1000))
    return samples


def worst_between(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """The largest latency of a probe in flight during [start, end] (monotonic times)."""
    return max((ms for at, ms in samples if at <= end and at + ms / 1000 >= start), default=0.0)


async def stalls(port: int, ca_file: str, policy: Path, health: int) -> list[tuple[str, float, float]]:
    """(event, its own latency ms, worst probe latency during it ms) for each large review and the reload; the
    first row is the probes' median and their worst over the whole run."""
    url = f"https://127.0.0.1:{port}/mutate"
    context = ssl.create_default_context(cafile=ca_file)
    bodies = {name: orjson.dumps(largest(fill, LABELLED)) for name, fill in ALL_SHAPES.items()}
    prober = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.webhook.hostile", "--probe", url, ca_file, "30",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await asyncio.sleep(2.0)
    events: list[tuple[str, float, float]] = []  # (what, start, end), monotonic
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for name, body in bodies.items():
            start = time.monotonic()
            status, _ = await admit(session, url, body)
            events.append((f"{name} ({len(body) // 1024} KiB, HTTP {status})", start, time.monotonic()))
            await asyncio.sleep(0.5)
        before = await _metric(session, health, "gpupack_policy_reload_failures_total")
        start = time.monotonic()
        policy.write_bytes(_big_policy())
        while await _metric(session, health, "gpupack_policy_reload_failures_total") == before:
            await asyncio.sleep(0.02)
        events.append(("1 MiB policy reload (refused after parsing)", start, time.monotonic()))
    out, _ = await prober.communicate()
    samples = [(at, ms) for at, ms in orjson.loads(out)][20:]  # after the handshake and first requests
    rows = [
        ("(probes: median, worst of the run)", statistics.median(ms for _, ms in samples), max(ms for _, ms in samples))
    ]
    rows += [(what, (end - start) * 1000, worst_between(samples, start, end)) for what, start, end in events]
    return rows


def _big_policy() -> bytes:
    """1 MiB of policy the webhook must parse to the end before it can refuse it: 30,000 small mappings."""
    lines = b"mode: audit\nclasses:\n" + b"".join(b"  k%06d: {a: 1, b: 2}\n" % i for i in range(40000))
    return lines[: lines.rindex(b"\n", 0, 1024 * 1024 - 10) + 1]


async def _metric(session: aiohttp.ClientSession, port: int, name: str) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


async def main_async(tcp: int, tls: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="gpupack-hostile-"))
    ca = issue_ca()
    write_pair(work, ca, issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
    policy = work / "policy.yaml"
    policy.write_bytes(b"mode: audit\n")
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    cert, key = str(work / "tls.crt"), str(work / "tls.key")
    port, bare_port, health = free_port(), free_port(), free_port()
    gpupack = Server(
        "gpupack webhook",
        [sys.executable, "-m", "gpupack", "--log-level", "ERROR", "webhook", "--config", str(policy),
         "--cert-file", cert, "--key-file", key, "--host", "127.0.0.1", "--port", str(port),
         "--health-port", str(health), "--health-host", "127.0.0.1", "--policy-poll-seconds", "0.2"],
        port,
    )  # fmt: skip
    bare = Server("bare aiohttp", [sys.executable, "-m", "bench.webhook.bare", str(bare_port), cert, key], bare_port)
    print(f"== idle connections ({tcp} plain TCP that never start TLS, then {tls} idle TLS), RSS in MB")
    print(f"{'server':<18}{'connections':<14}{'before':>8}{'open':>8}{'closed':>8}  admission meanwhile")
    for server in (bare, gpupack):
        server.start()
        try:
            for count, over_tls in ((tcp, False), (tls, True)):
                found = await idle_connections(server, context, count, over_tls)
                answered = f"HTTP {found['status']:.0f} in {found['ms']:.1f} ms" if found["status"] else "none"
                kind = f"{count} {'TLS' if over_tls else 'TCP'}"
                print(
                    f"{server.name:<18}{kind:<14}{found['before']:>8.0f}{found['during']:>8.0f}"
                    f"{found['after']:>8.0f}  {answered}"
                )
        finally:
            server.stop()
    gpupack.start()
    try:
        print("\n== stalls: a small admission every 10 ms while large requests arrive (ms)")
        print(f"{'event':<52}{'its latency':>12}{'worst probe':>12}")
        for event, own, worst in await stalls(port, str(work / "ca.crt"), policy, health):
            print(f"{event:<52}{own:>12.1f}{worst:>12.1f}")
    finally:
        gpupack.stop()
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--probe"]:  # the prober's own process
        url, ca_file, seconds = sys.argv[2], sys.argv[3], float(sys.argv[4])
        sys.stdout.buffer.write(orjson.dumps(asyncio.run(probe(url, ca_file, seconds))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tcp", type=positive_int, default=600, help="idle plain TCP connections (default 600)")
    parser.add_argument("--tls", type=positive_int, default=1000, help="idle TLS connections (default 1000)")
    args = parser.parse_args()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * (args.tcp + args.tls))), hard))
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    return asyncio.run(main_async(args.tcp, args.tls))


if __name__ == "__main__":
    sys.exit(main())
