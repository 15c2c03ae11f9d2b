"""The findings: pure functions of one window's usage, the cluster's objects, the policy and the thresholds.

One module per family, as the admin reads them: `utilization` (idle, underused and hot nodes, GPUs busy only
by GPU_UTIL), `memory` (memory held by idle GPUs, MIG instances near their memory), `sizing` (workloads holding
whole GPUs they do not use), `risks` (latency-critical pods on shared GPUs, inference on spot), `blockers`
(what keeps Cluster Autoscaler from removing an idle node) and `preemption` (pods kube-scheduler preempted, and
the workloads that lost them). A finding never queries anything.
"""

from __future__ import annotations

from gpupack.report.document import Finding, sort_findings
from gpupack.report.findings import blockers, memory, preemption, risks, sizing, utilization
from gpupack.report.findings.inputs import Inputs

__all__ = ["Inputs", "all_findings"]


def all_findings(inputs: Inputs) -> list[Finding]:
    """Every finding of every family, most severe first."""
    found: list[Finding] = []
    found += utilization.findings(inputs)
    found += memory.findings(inputs)
    found += sizing.findings(inputs)
    found += preemption.findings(inputs)
    if inputs.cluster is not None:
        found += risks.findings(inputs)
        found += blockers.findings(inputs)
    return sort_findings(found)
