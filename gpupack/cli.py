"""The `gpupack` command: one entry point, one subcommand per job.

    gpupack webhook   serve the mutating admission webhook (TLS)
    gpupack extender  serve the kube-scheduler extender (filter, prioritize)
    gpupack simulate  replay a GPU trace through the placement policies
    gpupack mutate    preview offline what the webhook does to a Pod
    gpupack certs     issue a CA and a serving certificate, print the caBundle
    gpupack report    find the GPU waste, price it, check that an optimisation worked
    gpupack mig-plan  choose MIG layouts from demand and apply them one idle node at a time
    gpupack demo      the embedded demo behind `make run` (no cluster needed)

Exit codes: 0 success, 1 a previewed pod is denied, 2 bad input or configuration, or a missing extra.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.x509.oid import ExtendedKeyUsageOID

from gpupack import __version__
from gpupack.certs.issue import KeyPair, ca_bundle, issue_ca, issue_serving_cert, webhook_sans, write_pair
from gpupack.core import logs
from gpupack.core.argtypes import dns_name, port, positive_float, positive_int
from gpupack.core.connections import DEFAULT_LIMIT
from gpupack.core.policy import PolicyError

if TYPE_CHECKING:
    from gpupack.core.server import ServeOptions

EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "report": ("report", ("matplotlib", "rich")),
    "demo": ("report", ("matplotlib", "rich")),
    "simulate": ("simulate", ("matplotlib", "rich")),
    "mig-plan": ("migplan", ("scipy",)),
}
"""Command -> (the extra of pyproject.toml it needs, the libraries that extra installs). The services (webhook,
extender, certs, mutate) need none: their image installs the package without extras, so these stay out of it."""


class MissingExtraError(ValueError):
    """A command's libraries are not installed: the install left out the extra that brings them."""


def check_extra(command: str) -> None:
    """Refuse a command whose extra is missing before it does any work: the libraries are imported where they
    draw or solve, which for a plot or the demo's report is after minutes of work, and as a traceback."""
    extra, libraries = EXTRAS.get(command, ("", ()))
    missing = [name for name in libraries if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(f"needs {' and '.join(missing)}, not installed: pip install 'gpupack[{extra}]'")


def _listener_flags(parser: argparse.ArgumentParser, host: str, default_port: int, host_help: str) -> None:
    """The flags both services share: where they listen, the health listener, and the connection limit."""
    parser.add_argument("--host", default=host, help=host_help)
    parser.add_argument("--port", type=port, default=default_port, help=f"port to listen on (default {default_port})")
    parser.add_argument(
        "--health-port",
        type=port,
        help="also serve /healthz, /readyz and /metrics over plain HTTP on this port (what the kubelet's probes and "
        "Prometheus reach on the pod IP; default: no such listener)",
    )
    parser.add_argument(
        "--health-host", default="", help="address of the health listener (default: every interface, IPv4 and IPv6)"
    )
    parser.add_argument(
        "--max-connections",
        type=positive_int,
        default=DEFAULT_LIMIT,
        help="connections held per listener; at the limit a new one replaces the one silent longest, never one with "
        f"a request in progress (default {DEFAULT_LIMIT})",
    )
    parser.add_argument("--cert-poll-seconds", type=positive_float, default=10.0, help="certificate files check period")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpupack",
        description="Cut GPU cost on Kubernetes: label-driven GPU requests, placement and priority.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--version", action="version", version=f"gpupack {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    hook = sub.add_parser(
        "webhook",
        help="serve the mutating admission webhook",
        description="Serve POST /mutate (AdmissionReview v1) over TLS 1.2+, plus /healthz, /readyz and /metrics. "
        "The policy file and the certificate files are re-read when they change.",
    )
    hook.add_argument("--config", type=Path, help="policy YAML (the mounted ConfigMap key); default: built-in policy")
    hook.add_argument("--cert-file", type=Path, required=True, help="serving certificate (PEM), e.g. tls.crt")
    hook.add_argument("--key-file", type=Path, required=True, help="private key (PEM), e.g. tls.key")
    _listener_flags(hook, "", 8443, "address to listen on (default: every interface, IPv4 and IPv6)")
    api = hook.add_mutually_exclusive_group()
    api.add_argument(
        "--kubeconfig",
        type=Path,
        help="read PriorityClasses, node GPU resources and the gpupack scheduler's Lease with this kubeconfig "
        "(without API access GPU pods stay on default-scheduler)",
    )
    api.add_argument("--in-cluster", action="store_true", help="read them with the pod's service account")
    hook.add_argument("--policy-poll-seconds", type=positive_float, default=5.0, help="policy file check period")
    hook.add_argument("--max-body-bytes", type=int, default=3 * 1024 * 1024, help="larger bodies get HTTP 413")
    hook.add_argument("--body-timeout", type=positive_float, default=10.0, help="seconds to receive a body (else 408)")

    ext = sub.add_parser(
        "extender",
        help="serve the kube-scheduler extender",
        description="Serve POST /filter, POST /prioritize and POST /preempt (kube-scheduler extender v1), GET /state, "
        "/healthz, "
        "/readyz and /metrics on loopback (kube-scheduler beside it calls it there); anywhere else only over TLS with "
        "client certificates (--cert-file, --key-file, --client-ca-file), since a caller can reserve capacity. "
        "Nodes and pods come from the API "
        "(list + watch; --kubeconfig, else the pod's service account) or from list files (--nodes, --pods); live "
        "GPU utilization from Prometheus (--prometheus-url) or a DCGM exporter text snapshot (--metrics-file).",
    )
    ext.add_argument("--config", type=Path, help="policy YAML (the mounted ConfigMap key); default: built-in policy")
    ext_cluster = ext.add_mutually_exclusive_group()
    ext_cluster.add_argument("--kubeconfig", type=Path, help="watch nodes and pods with this kubeconfig")
    ext_cluster.add_argument("--nodes", type=Path, help="offline: `kubectl get nodes -o json` output")
    ext.add_argument("--pods", type=Path, help="offline, with --nodes: `kubectl get pods -A -o json` output")
    ext_live = ext.add_mutually_exclusive_group()
    ext_live.add_argument("--prometheus-url", help="Prometheus base URL, e.g. http://prometheus:9090")
    ext_live.add_argument("--metrics-file", type=Path, help="a DCGM exporter /metrics text snapshot")
    _listener_flags(
        ext, "127.0.0.1", 8888, "address of the verbs (default 127.0.0.1; another address needs TLS and client CA)"
    )
    ext.add_argument("--cert-file", type=Path, help="serving certificate (PEM) for HTTPS")
    ext.add_argument("--key-file", type=Path, help="private key (PEM) for HTTPS")
    ext.add_argument("--client-ca-file", type=Path, help="accept only clients with a certificate signed by this CA")
    ext.add_argument("--policy-poll-seconds", type=positive_float, default=5.0, help="policy file check period")

    sim = sub.add_parser(
        "simulate",
        help="replay a GPU trace through the placement policies",
        description="Replay the Alibaba openb GPU-sharing trace with the published protocol (shuffle per seed, "
        "inflate to 1.3x the cluster's GPU capacity, pods never leave) under each placement policy, and report "
        "GPU allocation, unallocated GPUs, fragmentation and idle nodes at 100% and 130% arrived demand.",
    )
    sim.add_argument(
        "--trace",
        type=Path,
        help="directory of the openb CSVs (default: data/alibaba-gpu-v2023/csv of the source checkout; an installed "
        "gpupack has no trace)",
    )
    sim.add_argument("--variant", help="pod list: default (the default), gpushare40, ... or a CSV path")
    sim.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help="random, spread, binpack, bestfit, dotproduct, fgd, gpupack or gpupack-autoscaled; repeat to choose "
        "several (default: all)",
    )
    sim.add_argument(
        "--seeds",
        type=int,
        help="seeds 42, 43, ... (default 10); with --compare-preemption, days from the scenario's seed",
    )
    sim.add_argument(
        "--jobs",
        type=positive_int,
        help="runs (policy x seed) in parallel processes (default: every core this process may use); the numbers "
        "are the serial run's",
    )
    sim.add_argument(
        "--scenario",
        type=Path,
        metavar="FILE.yaml",
        help="instead of the trace: a synthetic day (e.g. scenarios/synthetic-day.yaml) under spread and gpupack",
    )
    sim.add_argument(
        "--compare-preemption",
        action="store_true",
        default=None,
        help="with --scenario: the gpupack run with kube-scheduler's preemption alone and with the extender's preempt "
        "verb, over --seeds days (default 20): victims, victims killed for nothing, GPU-hours of work lost",
    )
    sim.add_argument("--scale", type=positive_float, help="with --scenario: multiply nodes, replicas and arrival rates")
    sim.add_argument("--hours", type=positive_float, help="with --scenario: override the simulated hours")
    sim.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    sim.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="draw allocation against arrived demand (with --scenario: the day's GPUs, nodes and utilization)",
    )

    mutate = sub.add_parser(
        "mutate",
        help="preview what the webhook does to a Pod",
        description="Read a Pod (YAML or JSON) or an AdmissionReview and print, offline, whether it is allowed, "
        "the scheduler it goes to, the warnings, the JSON Patch and the mutated pod.",
    )
    mutate.add_argument("file", help="Pod or AdmissionReview file, or - for standard input")
    mutate.add_argument("--config", type=Path, help="policy YAML to preview; default: built-in policy")
    mutate.add_argument("--json", action="store_true", help="print one JSON object: allowed, message, patch, ...")
    mutate.add_argument(
        "--opted-in-namespace", action="store_true", help='as if the namespace is labelled gpupack.io/enabled="true"'
    )
    mutate.add_argument("--priority-classes", type=Path, help="`kubectl get priorityclasses -o json` output")
    mutate.add_argument("--nodes", type=Path, help="`kubectl get nodes -o json` output (MIG profiles offered)")
    mutate.add_argument(
        "--lease",
        type=Path,
        help="`kubectl get lease -n gpupack-system gpupack-scheduler -o json` output: whether the gpupack scheduler "
        "has a live leader now (default: assume it has)",
    )

    certs = sub.add_parser(
        "certs",
        help="issue a CA and a serving certificate",
        description="Write ca.crt, ca.key, tls.crt and tls.key to --out and print the base64 caBundle for the "
        "MutatingWebhookConfiguration. An existing CA in --out is reused, so the caBundle stays valid.",
    )
    certs.add_argument("--out", type=Path, required=True, help="directory to write to")
    certs.add_argument("--dns", nargs="+", type=dns_name, default=[], metavar="NAME", help="DNS names of the server")
    certs.add_argument("--ip", nargs="+", default=[], metavar="IP", help="IP addresses of the server")
    certs.add_argument("--service", help="add the names of this Service: svc, svc.ns, svc.ns.svc")
    certs.add_argument("--namespace", default="gpupack-system", help="namespace of --service")
    certs.add_argument("--days", type=positive_int, default=365, help="validity of the serving certificate")
    certs.add_argument("--new-ca", action="store_true", help="issue a new CA even if --out has one")
    certs.add_argument(
        "--client",
        type=dns_name,
        metavar="NAME",
        help="also write client.crt and client.key, a client certificate for NAME from the same CA (what "
        "kube-scheduler presents to an extender started with --client-ca-file)",
    )

    report = sub.add_parser(
        "report",
        help="find the GPU waste, price it, and check that an optimisation worked",
        description="Measure first, prove after: GPU utilization per node and GPU over a window (Prometheus with the "
        "DCGM exporter, or nvidia-smi CSV logs), findings with the action to take (idle and underused nodes, memory "
        "held idle, oversized workloads, MIG instances near their memory, pods at risk, what keeps Cluster Autoscaler "
        "from removing a node), their price, and the before/after verdict.",
    )
    from gpupack.report.cli import add_arguments

    add_arguments(report)

    mig = sub.add_parser(
        "mig-plan",
        help="choose MIG layouts from demand, print the mig-parted config and labels, apply them safely",
        description="The MIG layouts that serve the pods' MIG demand (the webhook's sizing of labelled workloads, "
        "plus an optional forecast) with the fewest GPUs, then nodes, under NVIDIA's placement rules; nodes running "
        "GPU pods are left alone. --apply relabels one idle node at a time behind a cordon and checks the result.",
    )
    from gpupack.migplan.cli import add_arguments as add_mig_arguments

    add_mig_arguments(mig)

    demo = sub.add_parser(
        "demo",
        help="run the embedded demo (what `make run` does)",
        description="Issue certificates, start the webhook on localhost with the built-in policy, send demo pods "
        "through it over HTTPS and print what changed and why.",
    )
    demo.add_argument("--workdir", type=Path, default=Path(".run"), help="where certificates are kept")
    demo.add_argument(
        "--prices",
        type=Path,
        help="price the week's report with this prices file (make run passes examples/prices.yaml, example prices)",
    )
    return parser


def _serve_options(args: argparse.Namespace, client_ca_file: Path | None = None) -> ServeOptions:
    from gpupack.core.server import ServeOptions

    return ServeOptions(
        host=args.host,
        port=args.port,
        cert_file=args.cert_file,
        key_file=args.key_file,
        client_ca_file=client_ca_file,
        cert_poll_seconds=args.cert_poll_seconds,
        max_connections=args.max_connections,
        health_host=args.health_host,
        health_port=args.health_port,
    )


def _cmd_webhook(args: argparse.Namespace) -> int:
    from gpupack.webhook.app import WebhookSettings
    from gpupack.webhook.service import WebhookConfig, run

    config = WebhookConfig(
        policy_file=args.config,
        serve=_serve_options(args),
        settings=WebhookSettings(args.max_body_bytes, args.body_timeout),
        policy_poll_seconds=args.policy_poll_seconds,
        kubeconfig=args.kubeconfig,
        in_cluster=args.in_cluster,
    )
    asyncio.run(run(config))
    return 0


def _cmd_extender(args: argparse.Namespace) -> int:
    from gpupack.extender.service import ExtenderConfig, run

    if bool(args.cert_file) != bool(args.key_file):
        raise ValueError("--cert-file and --key-file go together")
    if args.client_ca_file and not args.cert_file:
        raise ValueError("--client-ca-file needs --cert-file and --key-file (client certificates are a TLS feature)")
    if args.pods and not args.nodes:
        raise ValueError("--pods needs --nodes")
    config = ExtenderConfig(
        policy_file=args.config,
        serve=_serve_options(args, args.client_ca_file),
        policy_poll_seconds=args.policy_poll_seconds,
        kubeconfig=args.kubeconfig,
        in_cluster=args.nodes is None and args.kubeconfig is None,
        nodes_file=args.nodes,
        pods_file=args.pods,
        prometheus_url=args.prometheus_url,
        metrics_file=args.metrics_file,
    )
    asyncio.run(run(config))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from gpupack.simulator.cli import run, run_scenario

    return run_scenario(args) if args.scenario else run(args)


def _read_json(path: Path | None, expected: str = "a JSON list object (kind: List)") -> dict[str, object] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold {expected}")
    return data


def _cmd_mutate(args: argparse.Namespace) -> int:
    from gpupack.core.kube import facts_from_lists
    from gpupack.core.lease import ASSUMED_LIVE
    from gpupack.core.policy_store import load_policy_file
    from gpupack.webhook.preview import lease_status, preview, read_document, render_text

    loaded = load_policy_file(args.config)
    facts = facts_from_lists(_read_json(args.priority_classes), _read_json(args.nodes))
    lease = _read_json(args.lease, "a Lease object")
    scheduler = lease_status(lease, loaded.policy) if lease is not None else ASSUMED_LIVE
    result = preview(read_document(args.file), loaded, facts, args.opted_in_namespace, scheduler)
    print(json.dumps(result.as_json(), indent=2) if args.json else render_text(result))
    return 0 if result.allowed else 1


def _cmd_certs(args: argparse.Namespace) -> int:
    dns = list(args.dns) + (webhook_sans(args.service, args.namespace) if args.service else [])
    ca_crt, ca_key = args.out / "ca.crt", args.out / "ca.key"
    if not args.new_ca and ca_crt.exists() and ca_key.exists():
        ca = KeyPair(ca_crt.read_bytes(), ca_key.read_bytes())
    else:
        ca = issue_ca()
    serving = issue_serving_cert(ca, dns, list(args.ip), days=args.days)
    write_pair(args.out, ca, serving)
    if args.client:
        client = issue_serving_cert(ca, [args.client], [], days=args.days, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
        write_pair(args.out, ca, client, prefix="client")
    print(ca_bundle(ca.cert_pem))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from gpupack.report.cli import run

    return run(args)


def _cmd_mig_plan(args: argparse.Namespace) -> int:
    from gpupack.migplan.cli import run

    return run(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from gpupack.demo.run import run_demo

    if args.prices is not None:
        from gpupack.report.prices import read_prices

        read_prices(args.prices)  # a bad file is one line before the demo starts, not after it
    code: int = asyncio.run(run_demo(args.workdir, args.prices))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; errors in input or configuration print one line and exit 2."""
    args = build_parser().parse_args(argv)
    logs.setup(args.log_level)
    commands = {
        "webhook": _cmd_webhook,
        "extender": _cmd_extender,
        "simulate": _cmd_simulate,
        "mutate": _cmd_mutate,
        "certs": _cmd_certs,
        "report": _cmd_report,
        "mig-plan": _cmd_mig_plan,
        "demo": _cmd_demo,
    }
    try:
        check_extra(args.command)
        return commands[args.command](args)
    except (PolicyError, OSError, ValueError) as exc:
        print(f"gpupack {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
