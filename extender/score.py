"""How much a pod should go to a node, 0..10 (kube-scheduler's MaxExtenderPriority); pure functions.

Three scoring policies, chosen by `extender.scoring`:

- `spread`, the default scheduler's LeastAllocated: the mean over the pod's resources (cpu, memory, its GPU
  resource) of the free fraction left after placing it. The baseline.
- `binpack`, MostAllocated: the mean of the used fractions after placing it.
- `gpupack`:
  - a CPU-only pod scores 10 on nodes without GPUs and 0 on GPU nodes: a CPU pod on a GPU node keeps the
    autoscaler from removing it;
  - a node whose GPUs are all unrequested scores 0 unless the pod fills it: empty nodes stay empty so Cluster
    Autoscaler can remove them (when only empty nodes fit, one of them still gets the pod);
  - whole GPUs (training): best fit, `1 + 9 * used_after / capacity` of `nvidia.com/gpu`;
  - shared GPUs (MIG, time-sliced): `1 + 9 * (wp*packing + wl*load + wf*fragmentation) / (wp + wl + wf)` with
      packing       = the node's GPUs requested after placing the pod, in physical GPUs' worth, over its GPUs;
      load          = target-load shape of the live utilization u of the node's best GPU (Trimaran's
                      TargetLoadPacking, on GPUs, with target T):  u <= T: (1 - T) * u / T + T,
                      u > T: T * (1 - u) / (1 - T);  0.5 when no GPU of the node has fresh data;
      fragmentation = 1 when an instance of the pod's resource is already taken on a GPU that still offers
                      one (the pod fills a split GPU instead of splitting an intact one: with N instances of
                      the resource per GPU, the node's used count is not a multiple of N), 0.5 when the node's
                      GPUs are in use by other resources, 0 when they are all intact.
"""

from __future__ import annotations

from extender.demand import PodDemand
from extender.inventory import CPU, MEMORY
from extender.snapshot import NodeSnapshot
from gpupack import contract
from gpupack.policy import Policy

MAX_SCORE = 10
NEUTRAL_LOAD = 0.5


def _fractions_after(demand: PodDemand, snap: NodeSnapshot) -> list[float]:
    """Used fraction of each of the pod's resources (cpu, memory, GPU) after placing it."""
    out: list[float] = []
    resources = [CPU, MEMORY] + ([demand.gpu_resource] if demand.gpu_resource else [])
    for resource in resources:
        capacity = snap.node.allocatable.get(resource, 0)
        if capacity > 0:
            after = snap.used.get(resource, 0) + demand.requests.get(resource, 0)
            out.append(min(after / capacity, 1.0))
    return out


def spread(demand: PodDemand, snap: NodeSnapshot) -> int:
    """LeastAllocated: more free capacity left, higher score."""
    used = _fractions_after(demand, snap)
    return round(MAX_SCORE * (1 - sum(used) / len(used))) if used else 0


def binpack(demand: PodDemand, snap: NodeSnapshot) -> int:
    """MostAllocated: less free capacity left, higher score."""
    used = _fractions_after(demand, snap)
    return round(MAX_SCORE * sum(used) / len(used)) if used else 0


def target_load(util: float, target: float) -> float:
    """Rises from `target` at idle to 1 at `target`, then falls to 0 at full load (all in 0..1)."""
    if util <= target:
        return (1 - target) * util / target + target
    return max(target * (1 - util) / (1 - target), 0.0)


def fragmentation(demand: PodDemand, snap: NodeSnapshot) -> float:
    """1: the pod completes a GPU already split for its resource; 0.5: the node is in use; 0: intact."""
    resource = demand.gpu_resource
    node = snap.node
    if resource is None or node.gpu_count <= 0:
        return 0.0
    per_gpu = node.allocatable.get(resource, 0) / node.gpu_count
    used = snap.used.get(resource, 0)
    if per_gpu > 1 and used % per_gpu:
        return 1.0
    return 0.5 if not snap.empty else 0.0


def gpupack_score(demand: PodDemand, snap: NodeSnapshot, policy: Policy) -> int:
    """The project's score (see the module docstring for the formula)."""
    node = snap.node
    resource = demand.gpu_resource
    if resource is None:
        return MAX_SCORE if node.gpu_capacity <= 0 else 0
    capacity = node.gpu_capacity
    if capacity <= 0:
        return 0
    share = node.shares.get(resource, 1.0)
    packing = min((snap.gpu_used + demand.gpu_count * share) / capacity, 1.0)
    if snap.empty and packing < 1.0:
        return 0
    if resource == contract.RESOURCE_GPU:
        return 1 + round(9 * packing)
    weights = policy.extender.weights
    target = policy.extender.target_utilization
    load = max((target_load(u, target) for u in snap.utils), default=NEUTRAL_LOAD)
    total = weights.packing + weights.load + weights.fragmentation
    blend = (
        weights.packing * packing + weights.load * load + weights.fragmentation * fragmentation(demand, snap)
    ) / total
    return 1 + round(9 * blend)


def score(demand: PodDemand, snap: NodeSnapshot, policy: Policy) -> int:
    """The score of the policy's scoring mode, 0..10."""
    mode = policy.extender.scoring
    if mode == "spread":
        return spread(demand, snap)
    if mode == "binpack":
        return binpack(demand, snap)
    return gpupack_score(demand, snap, policy)
