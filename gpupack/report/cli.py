"""`gpupack report`: read the sources the command line names, build the report, print or write it.

    gpupack report (--prometheus-url URL | --nvidia-smi FILE...) [--kubeconfig F | --in-cluster | --cluster FILE...]
                   [--window 7d] [--end TIME] [--prices FILE] [--before A..B --after C..D] [--work-query PROMQL]
                   [--metric gpu-util|engine-active] [--config POLICY] [--json | --html FILE]

Everything is read first, then judged: the sources are the only part that waits on anything.
The module is imported to build every `gpupack` command's parser: what the report needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupack.core.argtypes import positive_float
from gpupack.core.thresholds import Thresholds
from gpupack.report.nvidia_smi import NvidiaSmiLogs
from gpupack.report.window import span, window

if TYPE_CHECKING:
    from gpupack.core.policy import Policy
    from gpupack.report.churn import Churn
    from gpupack.report.cluster import Cluster
    from gpupack.report.document import Report
    from gpupack.report.prices import Prices
    from gpupack.report.sources import Progress, UsageSource
    from gpupack.report.usage import Usage, UtilizationMetric, Window

WORK_UNIT = "unit of --work-query"
DEFAULT_WINDOW = "7d"
"""The guide's (docs/method.md): a node under 30 % for a week is in scope."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `report` subcommand's flags."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus-url", help="Prometheus (or Thanos, Mimir, VictoriaMetrics) base URL")
    source.add_argument(
        "--nvidia-smi",
        nargs="+",
        metavar="FILE",
        help="nvidia-smi CSV logs, one per node: NODE=FILE, or files named for their nodes",
    )
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument(
        "--kubeconfig",
        type=Path,
        help="read nodes, pods, PDBs, DaemonSets and the preemption and Karpenter Events with this kubeconfig",
    )
    cluster.add_argument("--in-cluster", action="store_true", help="read them with the pod's service account")
    cluster.add_argument(
        "--cluster",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="`kubectl get nodes,pods,pdb,daemonsets,events -A -o json` output (add resourceslices,resourceclaims "
        "where a DRA driver publishes GPUs)",
    )
    parser.add_argument(
        "--window", help="length of the window (default 7d; nvidia-smi: what the logs cover; Prometheus durations)"
    )
    parser.add_argument(
        "--end", help="end of the window: now, RFC 3339 or epoch seconds (default: now; nvidia-smi: the logs' end)"
    )
    parser.add_argument("--prices", type=Path, help="YAML of prices per GPU-hour by model (see examples/prices.yaml)")
    parser.add_argument("--before", metavar="A..B", help="the window before the change (with --after)")
    parser.add_argument("--after", metavar="C..D", help="the window after the change (with --before)")
    parser.add_argument(
        "--work-query", metavar="PROMQL", help="with Prometheus: the total work of a window, `{window}` substituted"
    )
    parser.add_argument(
        "--prometheus-header",
        action="append",
        metavar="NAME=VALUE",
        help="with Prometheus: a header for every query (a Mimir/Cortex tenant: X-Scope-OrgID=NAME); repeatable",
    )
    parser.add_argument(
        "--prometheus-bearer-token-file", type=Path, metavar="FILE", help="with Prometheus: send this bearer token"
    )
    parser.add_argument(
        "--prometheus-ca-file", type=Path, metavar="FILE", help="with an https Prometheus: the CA bundle to trust"
    )
    parser.add_argument(
        "--query-timeout",
        type=positive_float,
        default=120.0,
        metavar="SECONDS",
        help="with Prometheus: the timeout of each query (default 120)",
    )
    parser.add_argument(
        "--metric",
        choices=["gpu-util", "engine-active"],
        default="gpu-util",
        help="what classifies GPUs: DCGM_FI_DEV_GPU_UTIL (default, the guide's) or DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    )
    parser.add_argument("--config", type=Path, help="the gpupack policy to size and place with (default: built-in)")
    parser.add_argument("--idle", type=float, default=10.0, help="idle below this mean utilization, %% (default 10)")
    parser.add_argument("--underused", type=float, default=30.0, help="underused below this, %% (default 30)")
    parser.add_argument("--hot", type=float, default=85.0, help="hot above this, %% (default 85)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON document")
    output.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML page")


def _thresholds(args: argparse.Namespace) -> Thresholds:
    if not 0 <= args.idle <= args.underused <= args.hot <= 100:
        raise ValueError("thresholds must hold 0 <= --idle <= --underused <= --hot <= 100")
    return Thresholds(idle=args.idle, underused=args.underused, hot=args.hot)


def _cluster(args: argparse.Namespace) -> Cluster | None:
    from gpupack.report.cluster import from_objects, read_cluster_file

    if args.cluster:
        return read_cluster_file(args.cluster)
    if args.kubeconfig is not None or args.in_cluster:
        from gpupack.core.kube import CLUSTER_LISTS, KubeCallFailed, KubeClusterObjects, api_client, resource_name

        reader = KubeClusterObjects(api_client(args.kubeconfig, args.in_cluster))
        try:
            objects = reader.read()
        except KubeCallFailed as exc:
            if exc.status != 403:
                raise
            *first, last = [resource_name(group, resource) for _, group, resource in CLUSTER_LISTS]
            raise ValueError(f"{exc} (the report needs list on {', '.join(first)} and {last}, all namespaces)") from exc
        return from_objects(objects, "the API")
    return None


def _source(args: argparse.Namespace, policy: Policy) -> UsageSource:
    """The usage source the arguments name; Prometheus with the extender's node label (the policy's
    `extender.metrics.nodeLabel`), so the report reads the nodes the extender scores."""
    if args.nvidia_smi:
        return NvidiaSmiLogs(args.nvidia_smi)
    from gpupack.report.prometheus import PrometheusUsage

    url = str(args.prometheus_url).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus-url {args.prometheus_url!r}: give an http:// or https:// URL")
    headers = {}
    for item in args.prometheus_header or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--prometheus-header {item!r}: give NAME=VALUE (X-Scope-OrgID=tenant-a)")
        headers[name.strip()] = value
    if args.prometheus_bearer_token_file is not None:
        token = _read_secret(args.prometheus_bearer_token_file, "--prometheus-bearer-token-file")
        headers["Authorization"] = f"Bearer {token}"
    ca = None if args.prometheus_ca_file is None else str(args.prometheus_ca_file)
    if ca is not None and not args.prometheus_ca_file.is_file():
        raise ValueError(f"--prometheus-ca-file {ca}: no such file")
    return PrometheusUsage.from_policy(
        url, policy.extender.metrics, timeout_seconds=args.query_timeout, headers=headers, ca_file=ca
    )


def _read_secret(path: Path, flag: str) -> str:
    """A token file's first line (a mounted Secret has no newline, a hand-written one may)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{flag} {path}: cannot be read ({exc})") from exc
    if not text:
        raise ValueError(f"{flag} {path}: the file is empty")
    return text.splitlines()[0]


def _window(args: argparse.Namespace, source: UsageSource) -> Window:
    """The window asked for; with nvidia-smi logs and no --end, the logs' own end (and, without --window, all
    they cover)."""
    if isinstance(source, NvidiaSmiLogs) and args.end is None:
        covered = source.covered()
        return covered if args.window is None else window(args.window, str(covered.end))
    return window(args.window or DEFAULT_WINDOW, args.end or "now")


def report(args: argparse.Namespace, progress: Progress | None = None) -> Report:
    """Read every source the arguments name and build the report. Raises ValueError or OSError naming what
    could not be read."""
    from gpupack.core.policy_store import load_policy_file
    from gpupack.report.build import build_report
    from gpupack.report.compare import DEFAULT_UNIT, compare, period
    from gpupack.report.findings import Inputs
    from gpupack.report.prices import read_prices
    from gpupack.report.savings import savings

    if bool(args.before) != bool(args.after):
        raise ValueError("--before and --after go together")
    if args.work_query and not args.prometheus_url:
        raise ValueError("--work-query needs --prometheus-url (it is a PromQL query)")
    prometheus_only = ("prometheus_header", "prometheus_bearer_token_file", "prometheus_ca_file")
    given = [f"--{name.replace('_', '-')}" for name in prometheus_only if getattr(args, name)]
    if given and not args.prometheus_url:
        raise ValueError(f"{', '.join(given)} need --prometheus-url")
    sides = [span(args.before), span(args.after)] if args.before and args.after else []  # bad spans fail first
    thresholds = _thresholds(args)
    metric: UtilizationMetric = args.metric
    policy = load_policy_file(args.config).policy
    prices: Prices | None = read_prices(args.prices) if args.prices else None
    source = _source(args, policy)
    try:
        cluster = _cluster(args)
        asked = _window(args, source)
        usage: Usage = source.usage(asked, metric, thresholds, progress)
        churn = _churn(source, asked)
        comparison = None
        if sides:
            before, after = (
                period(source.usage(w, metric, thresholds, progress), _work(args, source, w)) for w in sides
            )
            comparison = compare(before, after, WORK_UNIT if args.work_query else DEFAULT_UNIT)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    inputs = Inputs(usage, cluster, policy, thresholds, prices, churn)
    return build_report(inputs, savings(inputs), comparison)


def _churn(source: UsageSource, over: Window) -> Churn | None:
    """kube-scheduler's preemption churn over the window, from the Prometheus the usage came from (None from
    nvidia-smi logs, or a Prometheus without the scheduler's metrics)."""
    from gpupack.report.churn import read_churn
    from gpupack.report.prometheus import PrometheusUsage

    return read_churn(source, over) if isinstance(source, PrometheusUsage) else None


def _work(args: argparse.Namespace, source: UsageSource, over: Window) -> float | None:
    """The window's total of `--work-query` (None without one: busy GPU-hours are the work)."""
    if not args.work_query:
        return None
    from gpupack.report.prometheus import PrometheusUsage

    if not isinstance(source, PrometheusUsage):
        raise ValueError("--work-query needs --prometheus-url (it is a PromQL query)")
    return source.total(args.work_query, over)


def run(args: argparse.Namespace) -> int:
    """The subcommand: 0 when the report was made (printed, or written to --html)."""
    from rich.console import Console

    from gpupack.report.render_html import render_html
    from gpupack.report.render_text import query_progress, render

    console = Console(stderr=args.json)  # with --json, only the document goes to standard output
    with query_progress(console, json_output=args.json) as progress:
        made = report(args, progress)
    if args.json:
        document: dict[str, Any] = made.as_json()
        print(json.dumps(document, indent=2))
    elif args.html:
        args.html.write_text(render_html(made), encoding="utf-8")
        console.print(f"wrote {args.html}")
    else:
        render(made, console)
    return 0
