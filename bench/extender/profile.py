"""Where the extender's time goes, in-process: `python -m bench.extender.profile [--data DIR] [--repeat N]`.

Builds the benchmark's cluster state with `extender.service.load_lists` and its live metrics with
`StaticSource` + `aggregate`, then times and profiles (cProfile) the handlers' work per request without the
decision cache (what a miss on every node costs): parsing the
ExtenderArgs, `demand_of`, `filter_nodes` / `prioritize_nodes`, and serialising the answer. Also times the
startup pieces (reading the lists, `load_lists`, reading and aggregating the DCGM snapshot) and the memory
the state holds (tracemalloc).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from bench.extender.cluster import generate, request_bodies


def _rss_mb() -> float:
    text = Path("/proc/self/status").read_text()
    return int(text.split("VmRSS:")[1].split()[0]) / 1024


def _timed(label: str, fn: Any, *args: Any) -> Any:
    started = time.perf_counter()
    result = fn(*args)
    print(f"{label:<48}{time.perf_counter() - started:>9.2f} s   RSS after: {_rss_mb():>6.0f} MB")
    return result


def main() -> int:
    from gpupack.core.policy import Policy
    from gpupack.extender.demand import demand_of
    from gpupack.extender.live import aggregate
    from gpupack.extender.service import load_lists
    from gpupack.extender.sources import StaticSource
    from gpupack.extender.state import ClusterState
    from gpupack.extender.typical import ShapeBook
    from gpupack.extender.verbs import View, filter_nodes, prioritize_nodes
    from gpupack.extender.wire import filter_result, parse_args, priority_list

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="write the generated cluster here (kept)")
    parser.add_argument("--repeat", type=int, default=200, help="requests per verb to profile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = _timed("generate the cluster", generate, args.data or Path(tmp))
        bodies = request_bodies(cluster)
        policy = Policy()
        nodes = _timed("read nodes.json", lambda: orjson.loads(cluster.nodes_file.read_bytes())["items"])
        pods = _timed("read pods.json", lambda: orjson.loads(cluster.pods_file.read_bytes())["items"])
        gc.collect()
        tracemalloc.start()
        state = ClusterState()
        _timed("load_lists (5,000 nodes, 150,000 pods)", load_lists, state, nodes, pods, policy)
        state_mb = tracemalloc.get_traced_memory()[0] / 2**20
        del pods
        gc.collect()
        print(f"{'pods.json objects dropped':<48}{'':>11}   RSS after: {_rss_mb():>6.0f} MB")
        before = tracemalloc.get_traced_memory()[0]
        series = _timed(
            "StaticSource.read (DCGM text)", StaticSource(cluster.metrics_file).read, policy.extender.metrics
        )
        live = _timed("aggregate", aggregate, series, None, time.time())
        del series
        gc.collect()
        print(f"{'DCGM series dropped':<48}{'':>11}   RSS after: {_rss_mb():>6.0f} MB")
        live_mb = (tracemalloc.get_traced_memory()[0] - before) / 2**20
        tracemalloc.stop()
        print(f"memory held: cluster state {state_mb:.0f} MB, live metrics snapshot {live_mb:.0f} MB (tracemalloc)")
        book = ShapeBook()
        _timed("count the typical pod shapes (ShapeBook)", book.refresh, state)
        view = View(state, live, policy, book=book)  # no decision cache: every node of every request is decided

        def serve(verb: str, body: bytes) -> bytes:
            parsed = parse_args(body)
            demand = demand_of(parsed.pod, view.policy)
            if verb == "filter":
                outcome = filter_nodes(demand, parsed, view)
                return filter_result(parsed, outcome.passed, outcome.failed, outcome.unresolvable)
            return priority_list(parsed.names, prioritize_nodes(demand, parsed, view))

        for verb in ("filter", "prioritize"):
            started = time.perf_counter()
            for i in range(args.repeat):
                serve(verb, bodies[i % len(bodies)])
            per = (time.perf_counter() - started) / args.repeat * 1000
            print(f"\n== {verb}: {per:.2f} ms per request (handler work, no HTTP), {1000 / per:.0f}/s")
            profile = cProfile.Profile()
            profile.enable()
            for i in range(args.repeat):
                serve(verb, bodies[i % len(bodies)])
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
            print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
