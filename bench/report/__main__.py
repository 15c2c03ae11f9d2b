"""Run: `python -m bench.report [--nodes N] [--gpus N] [--days N] [--resolution S] [--data DIR]` (or
`make bench-report`).

A week of a 500-node cluster (8 GPUs each, every tenth node's GPUs in MIG: `bench.report.cluster`) at one-minute
resolution is written as OpenMetrics, six hours per file, and backfilled with promtool into one TSDB
(`gpupack.testing.history`; `--data DIR` keeps it and reuses it on the next run with the same settings). Debian's
`prometheus` serves it, and in the same run, each in a process of its own (`bench.report.child`):

  - the report: `PrometheusUsage.usage` over the week, `--rounds` times (the first reads the TSDB from disk);
  - the naive way: the raw samples of the four signals over the same week, a day per query and signal.

Measured: wall time, peak RSS (the child's VmHWM, its interpreter and imports included) and numbers pulled.
Targets for the report: at most 30 s and 300 MB, pulling at most 1 % of the raw samples.
Results: a table on stdout and bench/results/report.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.report.cluster import cluster
from gpupack.core.argtypes import positive_float, positive_int
from gpupack.testing.history import PROMETHEUS, PROMTOOL, PrometheusServer, backfill_chunked

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/results"
END = 1793577600.0
"""2026-11-02T00:00:00Z: the week ends at a fixed time in the past, passed explicitly."""
TARGET_SECONDS, TARGET_RSS_MB, TARGET_FRACTION = 30.0, 300.0, 0.01
BYTES_PER_SAMPLE = 290
"""OpenMetrics text per sample with the exporter's labels (measured: 285)."""


def _child(mode: str, url: str, start: float, end: float, *extra: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.report.child", mode, url, f"{start:.3f}", f"{end:.3f}", *extra]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(args: argparse.Namespace, data: Path, start: float) -> dict[str, Any]:
    """The TSDB under `data`, reused when an earlier run built it with the same settings."""
    settings = {k: getattr(args, k) for k in ("nodes", "gpus", "days", "resolution", "mig_every")} | {"end": END}
    marker = data / "built.json"
    if marker.exists() and json.loads(marker.read_text())["settings"] == settings:
        built: dict[str, Any] = json.loads(marker.read_text())
        print(f"reusing the TSDB in {data} ({built['samples']:,} samples)")
        return built
    shutil.rmtree(data / "tsdb", ignore_errors=True)
    nodes = cluster(args.nodes, args.gpus, start, END, mig_every=args.mig_every)
    points = round(args.days * 86400 / args.resolution)
    expected = points * sum(len(d.signals) for n in nodes for d in n.devices)
    chunk_bytes = expected * BYTES_PER_SAMPLE * 6 / (args.days * 24)
    free = shutil.disk_usage(data).free
    print(
        f"{expected:,} samples ({expected * BYTES_PER_SAMPLE / 1e9:.0f} GB of OpenMetrics text, "
        f"{chunk_bytes / 1e9:.1f} GB per 6 h file, two at a time); {free / 1e9:.0f} GB free in {data}"
    )
    if free < 3 * chunk_bytes + expected * 3:
        raise SystemExit(f"not enough disk space in {data} for two 6 h files and the TSDB")
    began = time.monotonic()

    def progress(chunk: int, chunks: int, samples: int) -> None:
        print(f"  {time.monotonic() - began:5.0f}s  file {chunk}/{chunks}  {samples:,} samples", flush=True)

    samples, largest = backfill_chunked(
        nodes, start, END, args.resolution, data / "tsdb", data / "scratch", 6, progress
    )
    built = {
        "settings": settings,
        "samples": samples,
        "largest_file_bytes": largest,
        "tsdb_bytes": _du(data / "tsdb"),
        "backfill_seconds": time.monotonic() - began,
    }
    marker.write_text(json.dumps(built))
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[1])
    parser.add_argument("--nodes", type=positive_int, default=500)
    parser.add_argument("--gpus", type=positive_int, default=8, help="GPUs per node")
    parser.add_argument("--days", type=positive_int, default=7, help="the window, ending 2026-11-02T00:00Z")
    parser.add_argument("--resolution", type=positive_float, default=60.0, help="seconds between samples")
    parser.add_argument("--mig-every", type=int, default=10, help="every Nth node in MIG mode (0: none)")
    parser.add_argument("--rounds", type=positive_int, default=2, help="report runs (the first reads from disk)")
    parser.add_argument("--naive-chunk-hours", type=positive_float, default=24.0)
    parser.add_argument("--data", type=Path, help="keep the TSDB here and reuse it (default: a temporary dir)")
    args = parser.parse_args(argv)
    for tool in (PROMETHEUS, PROMTOOL):
        if not Path(tool).exists():
            parser.error(f"{tool} is missing (Debian: apt-get install prometheus)")
    start = END - args.days * 86400.0
    data = args.data or Path(f"/tmp/gpupack-bench-report-{args.nodes}x{args.gpus}-{args.days}d")
    data.mkdir(parents=True, exist_ok=True)
    built = build(args, data, start)
    raw = int(built["samples"])
    print(f"TSDB: {built['tsdb_bytes'] / 1e6:.0f} MB for {raw:,} samples")
    runs: list[dict[str, Any]] = []
    with PrometheusServer(data / "tsdb", oldest=start) as server:
        for round_ in range(args.rounds):
            runs.append({"what": f"report, run {round_ + 1}"} | _child("report", server.url, start, END))
            print(f"  {runs[-1]}", flush=True)
        naive = {"what": "naive: raw samples"} | _child("naive", server.url, start, END, str(args.naive_chunk_hours))
        print(f"  {naive}", flush=True)
    rows = [*runs, naive]
    print()
    print("| read | wall s | peak RSS MB | numbers pulled | of the raw samples |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        share = row["samples"] / raw
        print(f"| {row['what']} | {row['seconds']:.1f} | {row['peak_rss_mb']:.0f} | {row['samples']:,} | {share:.4%} |")
    best = runs[-1]
    verdicts = {
        "seconds": best["seconds"] <= TARGET_SECONDS,
        "rss": best["peak_rss_mb"] <= TARGET_RSS_MB,
        "fraction": best["samples"] / raw <= TARGET_FRACTION,
    }
    print(
        f"\ntargets (last report run): <= {TARGET_SECONDS:g} s {'met' if verdicts['seconds'] else 'MISSED'}, "
        f"<= {TARGET_RSS_MB:g} MB {'met' if verdicts['rss'] else 'MISSED'}, "
        f"<= {TARGET_FRACTION:.0%} of raw samples {'met' if verdicts['fraction'] else 'MISSED'}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"settings": built["settings"], "build": built, "raw_samples": raw, "runs": rows, "targets_met": verdicts}
    (RESULTS / "report.json").write_text(json.dumps(out, indent=2))
    if args.data is None:
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
