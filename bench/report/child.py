"""One measured read in a process of its own, so that its peak RSS (VmHWM) is its own:
`python -m bench.report.child report|naive URL START END [CHUNK_HOURS]` prints one JSON line.

- `report`: `PrometheusUsage.usage` over [START, END), as `gpupack report` reads it.
- `naive`: the raw samples of the four DCGM signals over the same window, the way prometheus-api-client's
  `get_metric_range_data` fetches them (a `metric[chunk]` range-vector query per chunk), each chunk counted and
  dropped before the next; keeping them, as that function does, would only add to the peak.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from gpupack.core.thresholds import Thresholds
from gpupack.extender.sources import SIGNALS
from gpupack.report.prometheus import PrometheusUsage
from gpupack.report.usage import Window


def _vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def report(url: str, window: Window) -> dict[str, object]:
    source = PrometheusUsage(url)
    started = time.monotonic()
    usage = source.usage(window, "gpu-util", Thresholds())
    seconds = time.monotonic() - started
    source.close()
    return {
        "seconds": seconds,
        "samples": usage.samples,
        "gpus": len(usage.gpus),
        "nodes": len(usage.hourly),
        "step": source.last_step,
    }


def naive(url: str, window: Window, chunk_hours: float) -> dict[str, object]:
    client = PrometheusConnect(url=url, retry=Retry(total=0, raise_on_status=False))
    chunk = chunk_hours * 3600.0
    started = time.monotonic()
    samples = queries = 0
    for signal in SIGNALS:
        at = window.start
        while at < window.end:
            span = min(chunk, window.end - at)
            # [at, at + span): evaluated 1 ms before the chunk's end, as the report reads its window.
            params = {"time": f"{at + span - 0.001:.3f}", "timeout": "600s"}
            result = client.custom_query(f"{signal}[{round(span * 1000)}ms]", params=params, timeout=600)
            samples += sum(len(series["values"]) for series in result)
            queries += 1
            del result
            at += span
    return {"seconds": time.monotonic() - started, "samples": samples, "queries": queries}


def main(argv: list[str]) -> int:
    mode, url, start, end = argv[0], argv[1], float(argv[2]), float(argv[3])
    window = Window(start, end)
    out = report(url, window) if mode == "report" else naive(url, window, float(argv[4]))
    out["peak_rss_mb"] = _vm_kib("VmHWM") / 1024
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
