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
import functools
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupack.core.argtypes import positive_float
from gpupack.core.objects import MIG_CONFIG

if TYPE_CHECKING:
    from gpupack.core.kube import KubeNodeOps
    from gpupack.core.policy import Policy
    from gpupack.migplan.apply import ApplyReport
    from gpupack.migplan.solve import MigNode, Plan

DEFAULT_DEMAND_HOURS = 6.0


def config_map_ref(text: str) -> str:
    """`NAMESPACE/NAME` of a ConfigMap, both DNS names."""
    namespace, sep, name = text.partition("/")
    label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    if not sep or not re.fullmatch(label, namespace) or not re.fullmatch(rf"{label}(\.{label})*", name):
        raise argparse.ArgumentTypeError(f"{text!r}: write NAMESPACE/NAME, e.g. gpu-operator/gpupack-mig-parted-config")
    return text


def window_length(text: str) -> str:
    """A Prometheus duration, checked when the command line is read."""
    from gpupack.report.window import WindowError, duration

    try:
        duration(text)
    except WindowError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `mig-plan` subcommand's flags."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", type=Path, help="read nodes and pods with this kubeconfig")
    source.add_argument("--in-cluster", action="store_true", help="read them with the pod's service account")
    source.add_argument(
        "--cluster",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="`kubectl get nodes,pods -A -o json` output (add resourceslices where a DRA driver publishes GPUs)",
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
    parser.add_argument(
        "--window", type=window_length, default="7d", help="with --prometheus-url: the window's length (default 7d)"
    )
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
    parser.add_argument(
        "--include-whole-gpu-nodes",
        action="store_true",
        help="also plan MIG-capable nodes whose MIG is off (all-disabled, whole GPUs); by default they are left to "
        "the whole-GPU pods",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--output",
        type=Path,
        help="write the mig-parted config (version: v1) to this file; with --mig-config-map on a live cluster, that "
        "ConfigMap with the plan's layouts added, for kubectl apply -f",
    )
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
    apply.add_argument(
        "--poll", type=positive_float, default=5.0, help="seconds between two reads of a node while waiting (5)"
    )
    apply.add_argument(
        "--mig-config-map",
        type=config_map_ref,
        metavar="NAMESPACE/NAME",
        help="the ConfigMap the MIG manager reads its layouts from (ClusterPolicy migManager.config.name); --apply "
        "checks every planned name is in it. Needed when the plan names layouts beyond mig-parted's stock ones",
    )
    apply.add_argument("--metrics-file", type=Path, help="write the apply metrics here (node-exporter textfile)")
    apply.add_argument("--keep-going", action="store_true", help="go on with the next node after a failure")
    compare = parser.add_argument_group("compare (with --scenario)")
    compare.add_argument(
        "--compare",
        action="store_true",
        help="run the scenario's day under every stock layout of its MIG nodes and under the plan, and compare",
    )
    compare.add_argument("--jobs", type=int, default=None, help="days run at once (default: the usable cores)")


@dataclass(frozen=True)
class Inputs:
    """What the plan is made from."""

    demand: dict[str, int]
    nodes: list[MigNode]
    source: str
    skipped: dict[str, str]
    """MIG nodes the planner cannot plan, with the reason (left as they are)."""
    whole_gpus: int = 0
    """Whole GPUs pending pods ask: served by no MIG layout, said so the admin keeps whole-GPU nodes for them."""


def _policy(args: argparse.Namespace) -> Policy:
    from gpupack.core.policy import Policy
    from gpupack.core.policy_store import load_policy_file

    return load_policy_file(args.config).policy if args.config is not None else Policy()


def read_inputs(args: argparse.Namespace, policy: Policy, ops: KubeNodeOps | None) -> Inputs:
    """The demand and the MIG nodes from the source the command line names (`ops` for a live cluster), raised by
    the forecast."""
    from gpupack.migplan.demand import cluster_demand, mig_nodes, read_forecast, with_forecast

    if args.scenario is not None:
        from gpupack.migplan.scenario import scenario_demand, scenario_nodes
        from gpupack.simulator.day.scenario import load_scenario

        scenario = load_scenario(args.scenario)
        nodes = scenario_nodes(scenario, policy)
        skipped: dict[str, str] = {}
        demand, whole_gpus = scenario_demand(scenario, policy, nodes, args.demand_hours), 0
        source = f"{args.scenario} (first {args.demand_hours:g} h)"
    else:
        from gpupack.report.cluster import from_objects, read_cluster_file

        if ops is None:
            cluster = read_cluster_file(args.cluster)
        else:
            objects = [{**n, "kind": "Node"} for n in ops.list_nodes()]
            objects += [{**s, "kind": "ResourceSlice"} for s in ops.list_resource_slices()]
            cluster = from_objects(objects + [{**p, "kind": "Pod"} for p in ops.list_pods()], "the cluster")
        nodes, skipped = mig_nodes(cluster, policy, whole_gpu_nodes=args.include_whole_gpu_nodes)
        if args.include_busy_nodes:
            nodes = [replace(n, free=True) for n in nodes]
        asked = cluster_demand(cluster, policy, nodes)
        demand, whole_gpus = asked.mig, asked.whole_gpus
        source = cluster.source
    if args.demand is not None:
        demand = with_forecast(demand, read_forecast(args.demand))
    if args.prometheus_url is not None:
        from gpupack.migplan.forecast import prometheus_forecast
        from gpupack.report.prometheus import PrometheusUsage
        from gpupack.report.window import instant

        prometheus = PrometheusUsage(args.prometheus_url)
        try:
            demand = with_forecast(demand, prometheus_forecast(prometheus, args.window, instant(args.end)))
        finally:
            prometheus.close()
        source += f", peak of {args.window} from {prometheus.shown}"
    return Inputs(demand, nodes, source, skipped, whole_gpus)


def node_ops(args: argparse.Namespace) -> KubeNodeOps | None:
    """The API calls through the kubeconfig or the pod's service account; None without a live cluster."""
    from gpupack.core.kube import KubeNodeOps, api_client

    if args.kubeconfig is None and not args.in_cluster:
        return None
    return KubeNodeOps(api_client(args.kubeconfig, args.in_cluster))


def plan_json(plan: Plan, inputs: Inputs) -> dict[str, Any]:
    """The plan as the `--json` document."""
    from gpupack.migplan.config import config_name, mig_parted_config

    return {
        "source": inputs.source,
        "demand": dict(plan.demand),
        "gpus_needed": plan.gpus_needed,
        "optimal": plan.optimal,
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
        "not_planned": dict(inputs.skipped),
        "whole_gpus_pending": inputs.whole_gpus,
        "mig_parted_config": mig_parted_config(plan.nodes),
    }


def render_text(plan: Plan, inputs: Inputs) -> str:
    """The plan for people: what is asked, what it takes, each node's layout and the commands to set it."""
    import yaml

    from gpupack.migplan.config import config_name, mig_parted_config

    nodes, source = inputs.nodes, inputs.source
    current = {n.name: n.config for n in nodes}
    asked = ", ".join(f"{n}x {r.removeprefix('nvidia.com/mig-')}" for r, n in plan.demand.items() if n) or "nothing"
    lines = [
        f"MIG demand ({source}): {asked}",
        f"needs {plan.gpus_needed} GPUs on {plan.nodes_needed} of {len(nodes)} MIG nodes",
    ]
    if not plan.optimal:
        lines.append("not proven optimal: the layout program hit its time limit; this is the best plan it found")
    if plan.unserved:
        short = ", ".join(f"{n}x {r.removeprefix('nvidia.com/mig-')}" for r, n in plan.unserved.items())
        lines.append(f"cannot serve: {short} (no free MIG GPU left for them)")
    if plan.kept:
        lines.append(f"busy, left as they are: {', '.join(plan.kept)}")
    if plan.idle:
        lines.append(f"not needed, left as they are: {', '.join(plan.idle)}")
    lines += [f"not planned: {name}: {why}" for name, why in sorted(inputs.skipped.items())]
    if inputs.whole_gpus:
        lines.append(f"pending pods also ask {inputs.whole_gpus} whole GPUs: no MIG layout serves them")
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
        lines += [f"  kubectl label node {n.node} {MIG_CONFIG}={config_name(n)} --overwrite" for n in changes]
    return "\n".join(lines).rstrip() + "\n"


def read_config_map(ops: KubeNodeOps, where: str) -> dict[str, Any]:
    """The MIG manager's ConfigMap (`NAMESPACE/NAME`). Raises ValueError when it does not exist."""
    namespace, _, name = where.partition("/")
    found = ops.get_config_map(namespace, name)
    if found is None:
        raise ValueError(f"--mig-config-map: ConfigMap {where} not found")
    return found


def output_document(plan: Plan, config_map: dict[str, Any] | None) -> dict[str, Any]:
    """What `--output` writes: with the MIG manager's ConfigMap (`--mig-config-map` on a live cluster), that
    ConfigMap with the plan's layouts added (ready for `kubectl apply -f`); else the mig-parted document of the
    plan's layouts alone."""
    from gpupack.migplan.config import merged_config_map, mig_parted_config

    if config_map is not None:
        return merged_config_map(config_map, plan.nodes)
    return mig_parted_config(plan.nodes)


def apply(args: argparse.Namespace, plan: Plan, ops: KubeNodeOps, config_map: dict[str, Any] | None) -> ApplyReport:
    """Relabel the planned nodes (`gpupack.migplan.apply`), after checking the MIG manager knows every name."""
    from gpupack.core.gpus.stock import CUSTOM_PREFIX
    from gpupack.migplan.apply import ApplyMetrics, apply_plan, write_metrics
    from gpupack.migplan.apply_steps import ApplyOptions, Relabel
    from gpupack.migplan.config import config_name, mig_parted_document

    names = {config_name(n) for n in plan.nodes}
    custom = sorted(n for n in names if n.startswith(CUSTOM_PREFIX))
    if config_map is not None:
        known = mig_parted_document(config_map)["mig-configs"]
        absent = sorted(names - set(known))
        if absent:
            raise ValueError(
                f"{args.mig_config_map} lacks {', '.join(absent)}: add the config --output writes, then run again"
            )
    elif custom:
        raise ValueError(
            f"the plan names layouts beyond mig-parted's stock ones ({', '.join(custom)}): write them with --output, "
            "add them to the MIG manager's ConfigMap, and give it as --mig-config-map NAMESPACE/NAME"
        )
    options = ApplyOptions(
        timeout=args.timeout, poll=args.poll, max_unavailable=args.max_unavailable, keep_going=args.keep_going
    )
    metrics = ApplyMetrics()
    changes = [Relabel(n.node, config_name(n), n.instances) for n in plan.nodes]
    try:
        return apply_plan(ops, changes, options, metrics=metrics)
    finally:
        if args.metrics_file is not None:
            write_metrics(metrics, args.metrics_file)


def compare(args: argparse.Namespace, plan: Plan) -> str:
    """The day under every stock layout of the MIG model and under the plan, as a table (or JSON)."""
    from gpupack.migplan.config import config_name
    from gpupack.simulator.cli import available_cores
    from gpupack.simulator.day.layouts import compare_layouts, render_table, stock_candidates
    from gpupack.simulator.day.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    planned = {n.node: (config_name(n), n.per_gpu) for n in plan.nodes}
    jobs = args.jobs if args.jobs is not None else available_cores()
    results = compare_layouts(scenario, {**stock_candidates(), "mig-plan": planned}, jobs=jobs)
    return json.dumps(results, indent=2) if args.json else render_table(results) + "\n"


def run(args: argparse.Namespace) -> int:
    """Plan, print, write the config; apply or compare when asked. Exit 1 when demand is unserved or a node's
    reconfiguration failed (a node skipped as busy, cordoned or over the limit is not a failure)."""
    import yaml

    from gpupack.migplan.solve import plan

    if args.apply and args.scenario is not None:
        raise ValueError("--apply needs a cluster (--kubeconfig or --in-cluster), not a scenario")
    if args.apply and args.cluster:
        raise ValueError("--apply needs a live cluster (--kubeconfig or --in-cluster), not cluster files")
    if args.compare and args.scenario is None:
        raise ValueError("--compare runs a scenario's day: give --scenario FILE")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, not {args.jobs}")
    if args.max_unavailable > 1:
        raise ValueError(f"--max-unavailable is a fraction of the MIG nodes, from 0 to 1, not {args.max_unavailable}")
    policy = _policy(args)
    ops = node_ops(args)
    inputs = read_inputs(args, policy, ops)
    result = plan(inputs.demand, inputs.nodes, fill=args.fill)

    @functools.cache
    def config_map() -> dict[str, Any] | None:
        """The MIG manager's ConfigMap, read once, when `--output` or `--apply` first needs it."""
        if ops is None or args.mig_config_map is None:
            return None
        return read_config_map(ops, args.mig_config_map)

    if args.output is not None:
        args.output.write_text(yaml.safe_dump(output_document(result, config_map()), sort_keys=False))
    if args.compare:
        sys.stdout.write(compare(args, result))
        return 1 if result.unserved else 0
    if args.json and not args.apply:
        print(json.dumps(plan_json(result, inputs), indent=2))
    elif not args.json:
        sys.stdout.write(render_text(result, inputs))
    if not args.apply:
        return 1 if result.unserved else 0
    assert ops is not None  # --apply was refused above without a live cluster
    report = apply(args, result, ops, config_map())
    if args.json:
        applied = [
            {"node": r.node, "config": r.config, "outcome": r.outcome, "message": r.message} for r in report.results
        ]
        print(json.dumps({**plan_json(result, inputs), "applied": applied}, indent=2))
    else:
        sys.stdout.write("\napply:\n" + "".join(f"  {r.node}: {r.outcome}: {r.message}\n" for r in report.results))
    return 0 if report.ok and not result.unserved else 1
