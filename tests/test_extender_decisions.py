"""Table-driven tests of the extender's pure decisions: which nodes are filtered out, and how nodes score."""

from __future__ import annotations

import pytest

from gpupack.extender.filter import reject
from gpupack.extender.fragmentation import typical_shapes
from gpupack.extender.score import priorities, score, target_load
from gpupack.extender.typical import GPU_MODELS, ShapeBook
from tests.extender_kit import A100_BALANCED, A100_BALANCED_GPUS, T4_SHARED, demand, gpu_pod, node, policy, snap

MIG_1G = "nvidia.com/mig-1g.5gb"
MIG_2G = "nvidia.com/mig-2g.10gb"
SHARED = "nvidia.com/gpu.shared"
GPU = "nvidia.com/gpu"
SPOT = {"node-type": "spot"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def statefulset(pod: dict[str, object]) -> dict[str, object]:
    """The pod as the StatefulSet controller creates it: the StatefulSet is its controller reference."""
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "x", "controller": True}
    pod["metadata"]["ownerReferences"] = [owner]  # type: ignore[index]
    return pod


FILTER_CASES = [
    # (case, pod, node, used, utils, expected kind or None, unresolvable)
    ("inference never on spot", gpu_pod(GPU), node(gpus={GPU: 8}, labels=SPOT), {}, (), "spot", True),
    ("training may use spot", gpu_pod(GPU, 2, "training"), node(gpus={GPU: 8}, labels=SPOT), {}, (), None, False),
    (
        "StatefulSet pods never on spot, whatever the class",
        statefulset(gpu_pod(GPU, 1, "training")),
        node(gpus={GPU: 8}, labels=SPOT),
        {},
        (),
        "spot",
        True,
    ),
    ("a node without the resource cannot get it", gpu_pod(MIG_1G), node(gpus={GPU: 8}), {}, (), "no-resource", True),
    (
        "no free unit left, assumed pods included",
        gpu_pod(MIG_1G),
        node(gpus=A100_BALANCED_GPUS, labels=A100_BALANCED),
        {MIG_1G: 16},
        (),
        "insufficient",
        False,
    ),
    (
        "whole GPUs: 2 free, 4 needed",
        gpu_pod(GPU, 4, "training"),
        node(gpus={GPU: 8}),
        {GPU: 6},
        (),
        "insufficient",
        False,
    ),
    (
        "critical inference avoids a node whose every GPU is hot, which no preemption cools in time",
        gpu_pod(SHARED),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (0.9,) * 4,
        "hot",
        True,
    ),
    (
        "one cool GPU is enough",
        gpu_pod(SHARED),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (0.9, 0.9, 0.9, 0.5),
        None,
        False,
    ),
    (
        "a GPU without fresh data is never a reason to filter",
        gpu_pod(SHARED),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (0.9, 0.9, 0.9),
        None,
        False,
    ),
    (
        "stale metrics: nothing is filtered for load",
        gpu_pod(SHARED),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (),
        None,
        False,
    ),
    (
        "tolerant inference ignores hot GPUs",
        gpu_pod(SHARED, latency="tolerant"),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (0.99,) * 4,
        None,
        False,
    ),
    (
        "batch ignores hot GPUs",
        gpu_pod(SHARED, 1, "batch"),
        node(gpus={SHARED: 16}, labels=T4_SHARED),
        {},
        (0.99,) * 4,
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "pod", "node_json", "used", "utils", "kind", "unresolvable"),
    FILTER_CASES,
    ids=[c[0] for c in FILTER_CASES],
)
def test_filter_decision(
    case: str, pod: dict, node_json: dict, used: dict, utils: tuple, kind: str | None, unresolvable: bool
) -> None:
    rejection = reject(demand(pod), snap(node_json, used, utils), policy())
    if kind is None:
        assert rejection is None, case
    else:
        assert rejection is not None and rejection.kind == kind and rejection.unresolvable == unresolvable, case
        assert rejection.reason


def test_hot_threshold_is_a_policy_setting() -> None:
    pod, hot_node = gpu_pod(SHARED), node(gpus={SHARED: 16}, labels=T4_SHARED)
    assert reject(demand(pod), snap(hot_node, {}, (0.9,) * 4), policy("extender: {hotThreshold: 0.95}")) is None


@pytest.mark.parametrize(
    ("util", "expected"),
    [(0.0, 0.6), (0.3, 0.8), (0.6, 1.0), (0.8, 0.3), (1.0, 0.0)],
)
def test_target_load_rises_to_the_target_then_falls(util: float, expected: float) -> None:
    assert target_load(util, 0.6) == pytest.approx(expected)


# The typical pods of a cluster: one-GPU inference with 4 cores, 2-GPU training with 16, a quarter-GPU replica with 2.
BOOK = ShapeBook(
    typical_shapes([(4000, 1000, 1, ())] * 5 + [(16000, 1000, 2, ())] * 3 + [(2000, 250, 1, ())] * 2, GPU_MODELS)
)


def gpupack_score(pod: dict, node_json: dict, used: dict | None = None, utils: tuple = (), doc: str = "") -> int:
    return score(demand(pod, doc), snap(node_json, used, utils, doc), policy(doc), BOOK)


def ranked(values: list[int], doc: str = "") -> list[int]:
    """What `/prioritize` answers for these node scores."""
    return priorities(values, policy(doc))


A100 = node(gpus=A100_BALANCED_GPUS, labels=A100_BALANCED)
T4 = node(gpus={SHARED: 16}, labels=T4_SHARED)


def test_empty_nodes_stay_empty_for_shared_inference() -> None:
    assert gpupack_score(gpu_pod(MIG_1G), A100) == 0
    assert gpupack_score(gpu_pod(MIG_1G), A100, {MIG_2G: 1}) > 0


def test_mig_prefers_a_split_gpu_over_a_used_node_over_an_intact_one() -> None:
    fragment = gpupack_score(gpu_pod(MIG_1G), A100, {MIG_1G: 1})  # a GPU has one 1g taken and one free
    used_elsewhere = gpupack_score(gpu_pod(MIG_1G), A100, {MIG_2G: 1})
    intact = gpupack_score(gpu_pod(MIG_1G), A100)
    assert fragment > used_elsewhere > intact == 0


def test_shared_inference_packs_up_to_the_target_load_and_not_beyond() -> None:
    used = {SHARED: 1}
    at_target = gpupack_score(gpu_pod(SHARED), T4, used, (0.6, 0.0, 0.0, 0.0))
    idle = gpupack_score(gpu_pod(SHARED), T4, used, (0.0, 0.0, 0.0, 0.0))
    hot = gpupack_score(gpu_pod(SHARED), T4, used, (0.95, 0.95, 0.95, 0.95))
    stale = gpupack_score(gpu_pod(SHARED), T4, used, ())
    assert at_target > idle > hot
    assert hot < stale < at_target  # no data: neutral, between the two


def test_target_utilization_is_a_policy_setting() -> None:
    used, utils = {SHARED: 1}, (0.8, 0.8, 0.8, 0.8)
    assert gpupack_score(gpu_pod(SHARED), T4, used, utils, "extender: {targetUtilization: 0.8}") > gpupack_score(
        gpu_pod(SHARED), T4, used, utils
    )


def test_training_leaves_whole_gpus_that_the_typical_pods_can_use() -> None:
    # Typical pods take 1 or 2 whole GPUs. After a 2-GPU job, 8 GPUs with 4 taken leave 2 free (usable by
    # both), with 6 taken leave none to fragment: equal. With 5 taken it leaves 1 that the 2-GPU jobs cannot use.
    h100 = node(gpus={GPU: 8}, labels=H100, cpu="128")
    leaves_two = gpupack_score(gpu_pod(GPU, 2, "training"), h100, {GPU: 4})
    leaves_one = gpupack_score(gpu_pod(GPU, 2, "training"), h100, {GPU: 5})
    takes_last_two = gpupack_score(gpu_pod(GPU, 2, "training"), h100, {GPU: 6})
    assert takes_last_two == leaves_two > leaves_one


def test_one_gpu_pods_go_where_the_cpu_left_still_feeds_the_free_gpus() -> None:
    # 4 cores per GPU is the typical ratio: 12 cores leave 8 after the pod, which feed 2 of the 2 GPUs left
    # on a node with 6 taken but only 1 of the 7 GPUs left on a node with 1 taken.
    pod = gpu_pod(GPU, 1, "inference")
    small = node(gpus={GPU: 8}, labels=H100, cpu="12")
    assert gpupack_score(pod, small, {GPU: 6}) > gpupack_score(pod, small, {GPU: 1})


def test_cpu_only_pods_are_kept_off_free_gpus() -> None:
    cpu_pod = gpu_pod("cpu", 1, None)
    cpu_node = gpupack_score(cpu_pod, node(gpus={}))
    full_gpus = gpupack_score(cpu_pod, node(gpus={GPU: 8}, labels=H100), {GPU: 8})
    free_gpus = gpupack_score(cpu_pod, node(gpus={GPU: 8}, labels=H100))
    assert ranked([cpu_node, full_gpus, free_gpus]) == [10, 10, 9]  # no free GPU to strand on the first two


def test_shared_replicas_fill_a_started_gpu_before_an_intact_node() -> None:
    assert gpupack_score(gpu_pod(SHARED), T4, {SHARED: 1}) > gpupack_score(gpu_pod(SHARED), T4)


def test_empty_gpu_nodes_come_last_unless_the_pod_fills_them_or_the_cluster_is_fixed() -> None:
    h100 = node(gpus={GPU: 8}, labels=H100, cpu="128")
    four_gpus = node(gpus={GPU: 4}, labels={**H100, "nvidia.com/gpu.count": "4"}, cpu="128")
    one, four = gpu_pod(GPU, 1, "training"), gpu_pod(GPU, 4, "training")
    assert gpupack_score(one, h100, {GPU: 3}) > gpupack_score(one, h100)  # autoscaled (default): keep it empty
    assert gpupack_score(four, four_gpus) > gpupack_score(four, h100)  # filling an empty node leaves nothing idle
    fixed = "extender: {keepEmptyNodes: false}"
    # On a fixed cluster both strand nothing (7 free GPUs with 127 cores left, or 4 beside the 3 taken) and FGD
    # ties them; the node in use wins the tie, so the empty one stays whole for a multi-GPU pod.
    assert gpupack_score(one, h100, {GPU: 3}, (), fixed) > gpupack_score(one, h100, {}, (), fixed)


def test_gpupack_answers_ranks_and_the_others_their_scores() -> None:
    assert ranked([7_000_123, None, 7_000_123, 5_000_000, 12]) == [10, 0, 10, 9, 8]
    assert ranked(list(range(20, 0, -1)))[-1] == 1  # never below 1 for a known node
    assert ranked([3, None, 7], "extender: {scoring: spread}") == [3, 0, 7]


def test_spread_prefers_the_emptiest_node_and_binpack_the_fullest() -> None:
    h100 = node(gpus={GPU: 8}, labels=H100)
    pod = gpu_pod(GPU, 1, "training")
    for mode, emptier_wins in (("spread", True), ("binpack", False)):
        doc = f"extender: {{scoring: {mode}}}"
        empty, used = gpupack_score(pod, h100, {}, (), doc), gpupack_score(pod, h100, {GPU: 6, "cpu": 40000}, (), doc)
        assert (empty > used) is emptier_wins, mode


def test_scores_stay_within_0_and_10() -> None:
    # spread and binpack answer their scores as they are; gpupack's MIG blend is 0..10 before it becomes a rank.
    cases = [
        ("spread", gpu_pod(SHARED), T4),
        ("binpack", gpu_pod(GPU, 2), node(gpus={GPU: 8})),
        ("gpupack", gpu_pod(MIG_1G), A100),
    ]
    for mode, pod, node_json in cases:
        doc = f"extender: {{scoring: {mode}}}"
        for used in ({}, {MIG_1G: 16, MIG_2G: 8, SHARED: 3, GPU: 6, "cpu": 10**9, "memory": 10**15}):
            for utils in ((), (1.0,) * 8, (0.0,) * 8):
                assert 0 <= gpupack_score(pod, node_json, used, utils, doc) <= 10, (mode, used, utils)
