"""`gpupack mig-plan`: read the demand and the MIG nodes, choose the layouts, print them, and apply on request.

    gpupack mig-plan (--kubeconfig F | --in-cluster | --cluster FILE... | --scenario FILE) [--demand FILE]
                     [--prometheus-url URL [--window 7d] [--end TIME]] [--config POLICY] [--fill]
                     [--include-busy-nodes] [--json] [--output FILE]
                     [--apply [--timeout S] [--max-unavailable F] [--metrics-file F] [--keep-going]]

Without `--apply` nothing is changed: the plan, the mig-parted config it needs and the labels to set are printed.
The module is imported to build every `gpupack` command's parser: what the planner needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupack.argtypes import positive_float

if TYPE_CHECKING:
    from gpupack.policy import Policy
    from migplan.solve import MigNode, Plan

DEFAULT_DEMAND_HOURS = 6.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `mig-plan` subcommand's flags."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", type=Path, help="read nodes and pods with this kubeconfig")
    source.add_argument("--in-cluster", action="store_true", help="read them with the pod's service account")
    source.add_argument(
        "--cluster", nargs="+", type=Path, metavar="FILE", help="`kubectl get nodes,pods -A -o json` output"
    )
    source.add_argument("--scenario", type=Path, help="a synthetic-day scenario (scenarios/synthetic-day.yaml)")
    parser.add_argument(
        "--demand",
        type=Path,
        metavar="FILE",
        help="a forecast: MIG profile -> instances (YAML or JSON), e.g. last week's peak; raises the pods' demand",
    )
    parser.add_argument(
        "--prometheus-url",
        help="a forecast from Prometheus (kube-state-metrics): the peak of MIG instances requested over --window",
    )
    parser.add_argument("--window", default="7d", help="with --prometheus-url: the window's length (default 7d)")
    parser.add_argument("--end", default="now", help="with --prometheus-url: the window's end (default now)")
    parser.add_argument(
        "--demand-hours",
        type=positive_float,
        default=DEFAULT_DEMAND_HOURS,
        help=f"with --scenario: the demand is the peak of the day's first hours (default {DEFAULT_DEMAND_HOURS:g})",
    )
    parser.add_argument("--config", type=Path, help="the gpupack policy file (default: the built-in policy)")
    parser.add_argument(
        "--fill",
        action="store_true",
        help="give every free MIG node a layout, the demand's mix scaled to the free GPUs (default: only the "
        "nodes the demand needs; the others stay as they are, empty for the autoscaler)",
    )
    parser.add_argument(
        "--include-busy-nodes",
        action="store_true",
        help="plan nodes that run GPU pods as if free (you drain them); --apply still skips a node while a GPU pod "
        "runs on it",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--output", type=Path, help="write the mig-parted config (version: v1) to this file")
    apply = parser.add_argument_group("apply")
    apply.add_argument("--apply", action="store_true", help="relabel the planned nodes, one at a time")
    apply.add_argument(
        "--timeout", type=positive_float, default=900.0, help="seconds to wait for each node's MIG manager"
    )
    apply.add_argument(
        "--max-unavailable",
        type=positive_float,
        default=0.25,
        help="fraction of the MIG nodes that may be cordoned at once (default 0.25, at least one node)",
    )
    apply.add_argument("--metrics-file", type=Path, help="write the apply metrics here (node-exporter textfile)")
    apply.add_argument("--keep-going", action="store_true", help="go on with the next node after a failure")


@dataclass(frozen=True)
class Inputs:
    """What the plan is made from."""

    demand: dict[str, int]
    nodes: list[MigNode]
    source: str


def _policy(args: argparse.Namespace) -> Policy:
    from gpupack.policy import Policy
    from gpupack.policy_store import load_policy_file

    return load_policy_file(args.config).policy if args.config is not None else Policy()


def read_inputs(args: argparse.Namespace, policy: Policy) -> Inputs:
    """The demand and the MIG nodes from the source the command line names, raised by the forecast."""
    from migplan.demand import cluster_demand, mig_nodes, read_forecast, with_forecast

    if args.scenario is not None:
        from migplan.scenario import scenario_demand, scenario_nodes
        from simulator.day_scenario import load_scenario

        scenario = load_scenario(args.scenario)
        nodes = scenario_nodes(scenario, policy)
        demand = scenario_demand(scenario, policy, nodes, args.demand_hours)
        source = f"{args.scenario} (first {args.demand_hours:g} h)"
    else:
        from report.cluster import from_objects, read_cluster_file

        if args.cluster:
            cluster = read_cluster_file(args.cluster)
        else:
            from gpupack.kube import KubeClusterObjects, api_client

            cluster = from_objects(KubeClusterObjects(api_client(args.kubeconfig, args.in_cluster)).read())
        nodes = mig_nodes(cluster, policy)
        demand = cluster_demand(cluster, policy, nodes)
        source = cluster.source
    if args.include_busy_nodes:
        nodes = [replace(n, free=True) for n in nodes]
    if args.demand is not None:
        demand = with_forecast(demand, read_forecast(args.demand))
    if args.prometheus_url is not None:
        from migplan.forecast import prometheus_forecast
        from report.prometheus import PrometheusUsage
        from report.window import duration, instant

        duration(args.window)  # a bad duration is one line naming it, before any query
        prometheus = PrometheusUsage(args.prometheus_url)
        try:
            demand = with_forecast(demand, prometheus_forecast(prometheus, args.window, instant(args.end)))
        finally:
            prometheus.close()
        source += f", peak of {args.window} from {prometheus.shown}"
    return Inputs(demand, nodes, source)


def plan_json(plan: Plan, source: str) -> dict[str, Any]:
    """The plan as the `--json` document."""
    from migplan.config import config_name, mig_parted_config

    return {
        "source": source,
        "demand": dict(plan.demand),
        "gpus_needed": plan.gpus_needed,
        "nodes_needed": plan.nodes_needed,
        "unserved": dict(plan.unserved),
        "nodes": [
            {
                "node": n.node,
                "model": n.model,
                "config": config_name(n),
                "gpus": [dict(layout) for layout in n.per_gpu],
                "instances": n.instances,
            }
            for n in plan.nodes
        ],
        "kept_busy": list(plan.kept),
        "left_as_they_are": list(plan.idle),
        "mig_parted_config": mig_parted_config(plan.nodes),
    }


def render_text(plan: Plan, nodes: list[MigNode], source: str) -> str:
    """The plan for people: what is asked, what it takes, each node's layout and the commands to set it."""
    import yaml

    from migplan.config import config_name, mig_parted_config

    current = {n.name: n.config for n in nodes}
    asked = ", ".join(f"{n}x {r.removeprefix('nvidia.com/mig-')}" for r, n in plan.demand.items() if n) or "nothing"
    lines = [
        f"MIG demand ({source}): {asked}",
        f"needs {plan.gpus_needed} GPUs on {plan.nodes_needed} of {len(nodes)} MIG nodes",
    ]
    if plan.unserved:
        short = ", ".join(f"{n}x {r.removeprefix('nvidia.com/mig-')}" for r, n in plan.unserved.items())
        lines.append(f"cannot serve: {short} (no free MIG GPU left for them)")
    if plan.kept:
        lines.append(f"busy, left as they are: {', '.join(plan.kept)}")
    if plan.idle:
        lines.append(f"not needed, left as they are: {', '.join(plan.idle)}")
    lines.append("")
    for n in plan.nodes:
        name = config_name(n)
        change = "unchanged" if current.get(n.node) == name else f"was {current.get(n.node) or 'unlabelled'}"
        per = ", ".join(f"{k.removeprefix('nvidia.com/mig-')}: {v}" for k, v in n.instances.items())
        lines.append(f"{n.node} ({n.model}): {name} [{change}] -> {per}")
    config = mig_parted_config(plan.nodes)
    if config["mig-configs"]:
        lines += [
            "",
            "mig-parted config (add to the MIG manager's ConfigMap):",
            yaml.safe_dump(config, sort_keys=False),
        ]
    changes = [n for n in plan.nodes if current.get(n.node) != config_name(n)]
    if changes:
        lines += ["", "labels (or run with --apply, which cordons, waits and checks each node):"]
        lines += [f"  kubectl label node {n.node} nvidia.com/mig.config={config_name(n)} --overwrite" for n in changes]
    return "\n".join(lines).rstrip() + "\n"


def run(args: argparse.Namespace) -> int:
    """Plan, print, write the config; apply when asked. Exit 1 when demand is unserved or an apply failed."""
    import yaml

    from migplan.config import mig_parted_config
    from migplan.solve import plan

    if args.apply and args.scenario is not None:
        raise ValueError("--apply needs a cluster (--kubeconfig or --in-cluster), not a scenario")
    if args.apply and args.cluster:
        raise ValueError("--apply needs a live cluster (--kubeconfig or --in-cluster), not cluster files")
    if args.max_unavailable > 1:
        raise ValueError(f"--max-unavailable is a fraction of the MIG nodes, from 0 to 1, not {args.max_unavailable}")
    policy = _policy(args)
    inputs = read_inputs(args, policy)
    result = plan(inputs.demand, inputs.nodes, fill=args.fill)
    if args.output is not None:
        args.output.write_text(yaml.safe_dump(mig_parted_config(result.nodes), sort_keys=False))
    if args.json:
        print(json.dumps(plan_json(result, inputs.source), indent=2))
    else:
        sys.stdout.write(render_text(result, inputs.nodes, inputs.source))
    return 1 if result.unserved else 0
