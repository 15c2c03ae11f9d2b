"""What every finding reads, computed once: the window's usage per node and GPU, the cluster's pods per GPU, the
node classes, and prices."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpupack.core.objects import labels_of
from gpupack.core.policy import Policy
from gpupack.core.spot import spot_label
from gpupack.core.thresholds import NodeClass, Thresholds
from gpupack.report.churn import Churn
from gpupack.report.cluster import Cluster, key
from gpupack.report.prices import Prices
from gpupack.report.usage import GpuUsage, NodeUsage, Usage


@dataclass(frozen=True)
class Inputs:
    """The window's usage, the cluster (None when the report has no cluster source), the policy gpupack would
    apply, the thresholds, the prices (None: GPU-hours only) and kube-scheduler's preemption churn (None when
    the source has no scheduler metrics)."""

    usage: Usage
    cluster: Cluster | None
    policy: Policy
    thresholds: Thresholds = field(default_factory=Thresholds)
    prices: Prices | None = None
    churn: Churn | None = None

    @cached_property
    def nodes(self) -> dict[str, NodeUsage]:
        """Per node, its usage."""
        return self.usage.nodes()

    @cached_property
    def physical(self) -> list[GpuUsage]:
        """Whole GPUs (MIG instances folded)."""
        return self.usage.physical()

    @cached_property
    def classes(self) -> dict[str, NodeClass]:
        """Per node, the guide's (docs/method.md) class by its mean utilization."""
        return {name: self.thresholds.node_class(node.util_mean) for name, node in self.nodes.items()}

    def spot(self, node: str) -> str | None:
        """The recognised spot label the node carries (`policy.spot.recognised`), `key=value`; None on other nodes
        and when the cluster is unknown."""
        found = self.cluster.node_by_name.get(node) if self.cluster is not None else None
        return None if found is None else spot_label(labels_of(found), self.policy.spot.recognised)

    def price(self, node: str) -> float | None:
        """What one GPU-hour of `node` costs, None without prices or a matching entry."""
        if self.prices is None:
            return None
        model = self.nodes[node].model if node in self.nodes else None
        return self.prices.per_gpu_hour(model, self.spot(node) is not None)

    def idle_gpu_hours(self, node: str) -> float:
        """GPU-hours of the node's capacity not used over the window: GPUs x hours x (1 - utilization)."""
        return self.nodes[node].idle_gpu_hours(self.usage.window.hours) or 0.0

    @cached_property
    def pods_by_key(self) -> dict[str, dict[str, Any]]:
        """The cluster's pods by `namespace/name`."""
        return {key(p): p for p in self.cluster.pods} if self.cluster is not None else {}

    def pods_of(self, gpu: GpuUsage) -> list[dict[str, Any]]:
        """The cluster's pods the exporter mapped to `gpu` (none when the source maps no pods, or the pods are
        gone from the cluster)."""
        return [self.pods_by_key[p] for p in sorted(gpu.pods) if p in self.pods_by_key]
