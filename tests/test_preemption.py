"""The preempt verb: its pure decision (which candidates the pod would take, with the fewest and cheapest victims),
its wire format and its route, on hand-made nodes whose answer is worked out here."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpupack.core.objects import priority_of
from gpupack.extender.app import make_app
from gpupack.extender.preemption import (
    RANK_BATCH,
    RANK_CHECKPOINTED,
    RANK_OTHER,
    RANK_TRAINING,
    Candidate,
    candidate_cost,
    preempt,
    victim_rank,
)
from gpupack.extender.snapshot import NodeSnapshot
from gpupack.extender.state import PREEMPTING_MAX, ClusterState, PodRecord, Requests
from gpupack.extender.wire import ArgsError, parse_preemption_args, preemption_result
from tests.extender_kit import (
    A100_BALANCED,
    A100_BALANCED_GPUS,
    T4_SHARED,
    demand,
    extender_for,
    gpu_pod,
    node,
    policy,
    registry,
    snap,
)

MIG_1G = "nvidia.com/mig-1g.5gb"
MIG_2G = "nvidia.com/mig-2g.10gb"
SHARED = "nvidia.com/gpu.shared"
GPU = "nvidia.com/gpu"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
CPU_MEM: Requests = (("cpu", 1000), ("memory", 1 << 30))
NOW = 1_800_000_000.0
HOUR = 3600.0


def victims(node_name: str, resource: str, count: int, rank: int, prefix: str, each: int = 1) -> dict[str, PodRecord]:
    return {f"{prefix}-{i}": PodRecord(node_name, ((resource, each), *CPU_MEM), True, rank) for i in range(count)}


def full(node_json: dict[str, Any], pods: dict[str, PodRecord], utils: tuple[float, ...] = ()) -> NodeSnapshot:
    """The node with these pods bound to it."""
    used: dict[str, int] = {}
    for p in pods.values():
        for resource, n in p.requests:
            used[resource] = used.get(resource, 0) + n
    return snap(node_json, used, utils)


def decide(
    pod: dict[str, Any],
    nodes: dict[str, tuple[dict[str, Any], tuple[float, ...]]],
    pods: dict[str, PodRecord],
    proposed: dict[str, list[str]],
    pdb: dict[str, int] | None = None,
    measured: bool = True,
) -> Any:
    snapshots = {
        name: full(node_json, {k: p for k, p in pods.items() if p.node == name}, utils)
        for name, (node_json, utils) in nodes.items()
    }
    candidates = {name: Candidate(tuple(uids), (pdb or {}).get(name, 0)) for name, uids in proposed.items()}
    return preempt(demand(pod), priority_of(pod), candidates, snapshots, pods, policy(), measured, now=NOW)


def mig_node(name: str) -> dict[str, Any]:
    return node(name, gpus=A100_BALANCED_GPUS, labels=A100_BALANCED)


# what each victim costs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "rank"),
    [
        ({"gpupack.io/workload": "batch"}, {}, RANK_BATCH),
        ({"gpupack.io/workload": "training", "gpupack.io/checkpoint": "true"}, {}, RANK_CHECKPOINTED),
        ({"gpupack.io/workload": "training"}, {}, RANK_TRAINING),
        ({}, {"gpupack.io/class": "batch"}, RANK_BATCH),  # the class the webhook wrote (a namespace opt-in)
        ({"gpupack.io/workload": "inference"}, {}, RANK_OTHER),
        ({}, {}, RANK_OTHER),
    ],
)
def test_a_victims_cost_follows_its_class_and_checkpoints(
    labels: dict[str, str], annotations: dict[str, str], rank: int
) -> None:
    assert victim_rank(labels, annotations) == rank


# dropped candidates --------------------------------------------------------------------------------------------


def test_a_hot_node_is_dropped_for_latency_critical_inference_whatever_dies_there() -> None:
    # The case: one node full of batch pods on hot MIG instances, one full of training. The batch pods are
    # cheaper, but killing them frees slices the pod would not get (every GPU stays above 85 % for minutes).
    pods = {**victims("hot", MIG_1G, 16, RANK_BATCH, "b"), **victims("cool", MIG_1G, 16, RANK_TRAINING, "t")}
    outcome = decide(
        gpu_pod(MIG_1G),
        {"hot": (mig_node("hot"), (0.95,) * 8), "cool": (mig_node("cool"), (0.5,) * 8)},
        pods,
        {"hot": ["b-0"], "cool": ["t-0"]},
    )
    assert list(outcome.kept) == ["cool"] and outcome.kept["cool"].victims == ("t-0",)
    assert outcome.dropped["hot"].kind == "hot"
    # the reason goes into kube-scheduler's FailedScheduling message, which reads "%" as a format verb
    assert outcome.dropped["hot"].reason == "every GPU is above the hot threshold 85 pct (coolest at 95 pct)"


def test_a_tolerant_pod_may_take_the_hot_node() -> None:
    pods = victims("hot", MIG_1G, 16, RANK_BATCH, "b")
    outcome = decide(
        gpu_pod(MIG_1G, latency="tolerant"), {"hot": (mig_node("hot"), (0.95,) * 8)}, pods, {"hot": ["b-0"]}
    )
    assert list(outcome.kept) == ["hot"]


def test_a_candidate_where_the_victims_free_nothing_the_pod_uses_is_dropped() -> None:
    # the pod needs a 1g.5gb; the victims proposed hold 2g.10gb instances (the scheduler's dry run counts only
    # what it knows of the extended resources); the node's 1g.5gb stay full
    pods = {**victims("n", MIG_1G, 16, RANK_TRAINING, "t"), **victims("n", MIG_2G, 2, RANK_BATCH, "b")}
    outcome = decide(gpu_pod(MIG_1G), {"n": (mig_node("n"), (0.5,) * 8)}, pods, {"n": ["b-0", "b-1"]})
    assert outcome.kept == {} and outcome.dropped["n"].kind == "insufficient"


@pytest.mark.parametrize(("measured", "kept"), [(True, []), (False, ["n"])])
def test_an_unmeasured_node_is_dropped_for_critical_inference_only_when_the_extender_reads_live_data(
    measured: bool, kept: list[str]
) -> None:
    pods = victims("n", MIG_1G, 16, RANK_BATCH, "b")
    outcome = decide(gpu_pod(MIG_1G), {"n": (mig_node("n"), ())}, pods, {"n": ["b-0"]}, measured=measured)
    assert list(outcome.kept) == kept


def test_an_unknown_node_and_a_spot_node_for_inference_are_dropped() -> None:
    spot = node("spot", gpus={GPU: 8}, labels={**H100, "node-type": "spot"})
    pods = victims("spot", GPU, 8, RANK_BATCH, "b")
    outcome = decide(gpu_pod(GPU), {"spot": (spot, (0.3,) * 8)}, pods, {"spot": ["b-0"], "gone": ["x"]})
    assert outcome.kept == {}
    assert (outcome.dropped["spot"].kind, outcome.dropped["gone"].kind) == ("spot", "unknown-node")


# the fewest victims --------------------------------------------------------------------------------------------


def test_mig_preemption_gives_back_the_victims_of_other_profiles() -> None:
    # proposed: a 1g.5gb batch pod and two 2g.10gb ones; the pod needs one 1g.5gb: the 2g.10gb pods are spared
    pods = {**victims("n", MIG_1G, 16, RANK_BATCH, "s"), **victims("n", MIG_2G, 8, RANK_BATCH, "d")}
    outcome = decide(gpu_pod(MIG_1G), {"n": (mig_node("n"), (0.5,) * 8)}, pods, {"n": ["s-0", "d-0", "d-1"]})
    assert outcome.kept["n"].victims == ("s-0",) and outcome.trimmed == 2


def test_time_sliced_preemption_gives_back_a_victim_that_holds_no_replica() -> None:
    t4 = node("t4", gpus={SHARED: 16}, labels=T4_SHARED)
    pods = {**victims("t4", SHARED, 16, RANK_BATCH, "b"), "idle": PodRecord("t4", (("cpu", 500),), True, RANK_BATCH)}
    pod = gpu_pod(SHARED, 2, latency="tolerant")
    outcome = decide(pod, {"t4": (t4, (0.4,) * 4)}, pods, {"t4": ["b-0", "b-1", "idle"]})
    assert outcome.kept["t4"].victims == ("b-0", "b-1") and outcome.trimmed == 1


def test_victims_holding_the_pods_resource_stay_as_kube_scheduler_counted_them() -> None:
    # kube-scheduler's dry run counts the pods nominated to the node, which the extender cannot see: four GPU
    # victims proposed for a two-GPU pod all die, though the extender would count two enough
    h100 = node("h", gpus={GPU: 4}, labels=H100)
    pods = victims("h", GPU, 4, RANK_BATCH, "b")
    outcome = decide(gpu_pod(GPU, 2, "training"), {"h": (h100, (0.5,) * 4)}, pods, {"h": ["b-0", "b-1", "b-2", "b-3"]})
    assert len(outcome.kept["h"].victims) == 4 and outcome.trimmed == 0


def test_the_costliest_victims_that_free_nothing_the_pod_uses_go_back_first() -> None:
    # the pod needs a GPU and one of 4 CPUs; the GPU victim frees half a CPU, so one more CPU holder must die:
    # of the two proposed, the training pod is spared and the batch pod dies
    h100 = node("h", gpus={GPU: 2}, labels=H100, cpu="4")
    pods = {
        "gpu-holder": PodRecord("h", ((GPU, 1), ("cpu", 500)), True, RANK_BATCH),
        "cpu-batch": PodRecord("h", (("cpu", 1000),), True, RANK_BATCH),
        "cpu-training": PodRecord("h", (("cpu", 1000),), True, RANK_TRAINING),
        "rest": PodRecord("h", ((GPU, 1), ("cpu", 1500)), True, RANK_TRAINING),
    }
    outcome = decide(gpu_pod(GPU, 1, "training"), {"h": (h100, (0.5,) * 2)}, pods,
                     {"h": ["gpu-holder", "cpu-batch", "cpu-training"]})  # fmt: skip
    assert set(outcome.kept["h"].victims) == {"gpu-holder", "cpu-batch"}


def test_a_victim_needed_for_cpu_is_kept() -> None:
    h100 = node("h", gpus={GPU: 2}, labels=H100, cpu="4")
    pods = {
        "gpu-holder": PodRecord("h", ((GPU, 1), ("cpu", 500)), True, RANK_BATCH),
        "cpu-holder": PodRecord("h", (("cpu", 2500),), True, RANK_BATCH),
        "rest": PodRecord("h", ((GPU, 1), ("cpu", 1000)), True, RANK_TRAINING),
    }
    # the pod asks 1 GPU and 1 CPU of 4: the GPU victim alone frees half a CPU, so the CPU victim dies too
    pod = gpu_pod(GPU, 1, "training")
    outcome = decide(pod, {"h": (h100, (0.5,) * 2)}, pods, {"h": ["gpu-holder", "cpu-holder"]})
    assert set(outcome.kept["h"].victims) == {"gpu-holder", "cpu-holder"}


def test_a_victim_the_extender_does_not_know_is_kept_as_the_scheduler_chose_it() -> None:
    pods = victims("n", MIG_1G, 15, RANK_BATCH, "b")  # 16th slice used by a pod not seen yet
    snapshots_node = mig_node("n")
    outcome = decide(gpu_pod(MIG_1G), {"n": (snapshots_node, (0.5,) * 8)}, pods, {"n": ["new-uid"]})
    assert outcome.kept["n"].victims == ("new-uid",)


# the cheapest candidates ---------------------------------------------------------------------------------------


def whole_gpu_cluster(
    ranks: dict[str, int], each: dict[str, int] | None = None, ran: dict[str, float] | None = None
) -> tuple[dict[str, Any], dict[str, PodRecord]]:
    """H100 nodes of 4 GPUs full of pods of one rank each, `each` GPUs per pod (1), started `ran` hours ago (1)."""
    nodes = {name: (node(name, gpus={GPU: 4}, labels=H100), (0.5,) * 4) for name in ranks}
    pods: dict[str, PodRecord] = {}
    for name, rank in ranks.items():
        width = (each or {}).get(name, 1)
        started = NOW - (ran or {}).get(name, 1.0) * HOUR
        pods.update(
            {
                f"{name}-{i}": PodRecord(name, ((GPU, width), *CPU_MEM), True, rank, 0, started)
                for i in range(4 // width)
            }
        )
    return nodes, pods


@pytest.mark.parametrize(
    ("ranks", "winner"),
    [
        ({"ckpt": RANK_CHECKPOINTED, "plain": RANK_TRAINING}, "ckpt"),
        ({"batch": RANK_BATCH, "ckpt": RANK_CHECKPOINTED}, "batch"),
        ({"other": RANK_OTHER, "plain": RANK_TRAINING}, "plain"),
    ],
)
def test_the_candidate_whose_victims_cost_least_is_kept(ranks: dict[str, int], winner: str) -> None:
    nodes, pods = whole_gpu_cluster(ranks)
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {name: [f"{name}-0"] for name in ranks})
    assert list(outcome.kept) == [winner]
    assert all(d.kind == "costlier" for d in outcome.dropped.values())


def test_a_pod_disruption_budget_is_kept_when_another_candidate_avoids_it() -> None:
    nodes, pods = whole_gpu_cluster({"guarded": RANK_BATCH, "free": RANK_BATCH})
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {"guarded": ["guarded-0"], "free": ["free-0"]},
                     pdb={"guarded": 1})  # fmt: skip
    assert list(outcome.kept) == ["free"]


def test_fewer_gpu_hours_of_work_lost_wins_last() -> None:
    nodes, pods = whole_gpu_cluster({"wide": RANK_BATCH, "narrow": RANK_BATCH}, each={"wide": 2})
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {"wide": ["wide-0"], "narrow": ["narrow-0"]})
    assert list(outcome.kept) == ["narrow"]
    assert "2 GPU-hours of work" in outcome.dropped["wide"].reason


def test_a_wide_job_just_started_loses_less_work_than_a_narrow_one_hours_in() -> None:
    # 2 GPUs for 5 minutes against 1 GPU for 3 hours: the latest start, kube-scheduler's own last rule, agrees
    nodes, pods = whole_gpu_cluster(
        {"wide": RANK_BATCH, "narrow": RANK_BATCH}, each={"wide": 2}, ran={"wide": 5 / 60, "narrow": 3.0}
    )
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {"wide": ["wide-0"], "narrow": ["narrow-0"]})
    assert list(outcome.kept) == ["wide"]


def test_a_victim_not_started_yet_loses_no_work() -> None:
    nodes, pods = whole_gpu_cluster({"waiting": RANK_BATCH, "running": RANK_BATCH})
    pods["waiting-0"] = PodRecord("waiting", ((GPU, 1), *CPU_MEM), True, RANK_BATCH, 0, None)
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {"waiting": ["waiting-0"], "running": ["running-0"]})
    assert list(outcome.kept) == ["waiting"]


def test_equal_candidates_are_all_kept_for_the_scheduler_to_choose() -> None:
    nodes, pods = whole_gpu_cluster({"a": RANK_BATCH, "b": RANK_BATCH})
    outcome = decide(gpu_pod(GPU, 1, "training"), nodes, pods, {"a": ["a-0"], "b": ["b-0"]})
    assert set(outcome.kept) == {"a", "b"}


# priority before class -----------------------------------------------------------------------------------------

LOW, MIDDLE, HIGH = -100, 10_000, 100_000
"""The shipped batch and training PriorityClasses' values, and a latency-critical preemptor's."""


def with_priority(pod: dict[str, Any], priority: int) -> dict[str, Any]:
    """The pod as the API server stores it once its PriorityClass is resolved."""
    return {**pod, "spec": {**pod["spec"], "priority": priority}}


def prioritised(node_name: str, count: int, priority: int, prefix: str, rank: int = RANK_OTHER) -> dict[str, PodRecord]:
    return {f"{prefix}-{i}": PodRecord(node_name, ((MIG_1G, 1), *CPU_MEM), True, rank, priority) for i in range(count)}


def test_the_lower_priority_candidate_wins_over_fewer_victims_of_unknown_class() -> None:
    # The case: pods of another team without gpupack labels (all "other"), batch priority on `a`,
    # training priority on `b`. kube-scheduler's dry run asks 2 victims on `a` (a pod is nominated there) and 1
    # on `b`: fewer victims must not override the lower priority.
    pods = {**prioritised("a", 16, LOW, "batch"), **prioritised("b", 16, MIDDLE, "train")}
    outcome = decide(
        with_priority(gpu_pod(MIG_1G), HIGH),
        {"a": (mig_node("a"), (0.3,) * 8), "b": (mig_node("b"), (0.3,) * 8)},
        pods,
        {"a": ["batch-0", "batch-1"], "b": ["train-0"]},
    )
    assert list(outcome.kept) == ["a"] and outcome.kept["a"].victims == ("batch-0", "batch-1")
    assert outcome.dropped["b"].kind == "costlier"
    assert "at priority 10000" in outcome.dropped["b"].reason and "at priority -100" in outcome.dropped["b"].reason


def test_priority_outranks_the_gpupack_class() -> None:
    # batch at a high priority against training at a low one: the admin said the training pods may die first
    pods = {
        **prioritised("batch", 16, MIDDLE, "b", RANK_BATCH),
        **prioritised("train", 16, LOW, "t", RANK_TRAINING),
    }
    outcome = decide(
        with_priority(gpu_pod(MIG_1G), HIGH),
        {"batch": (mig_node("batch"), (0.3,) * 8), "train": (mig_node("train"), (0.3,) * 8)},
        pods,
        {"batch": ["b-0"], "train": ["t-0"]},
    )
    assert list(outcome.kept) == ["train"]


def test_priority_outranks_a_pod_disruption_budget() -> None:
    pods = {**prioritised("guarded", 16, LOW, "g"), **prioritised("free", 16, MIDDLE, "f")}
    outcome = decide(
        with_priority(gpu_pod(MIG_1G), HIGH),
        {"guarded": (mig_node("guarded"), (0.3,) * 8), "free": (mig_node("free"), (0.3,) * 8)},
        pods,
        {"guarded": ["g-0"], "free": ["f-0"]},
        pdb={"guarded": 1},
    )
    assert list(outcome.kept) == ["guarded"]


def test_within_one_priority_the_class_decides_as_before() -> None:
    pods = {
        **prioritised("ckpt", 16, LOW, "c", RANK_CHECKPOINTED),
        **prioritised("plain", 16, LOW, "p", RANK_TRAINING),
    }
    outcome = decide(
        with_priority(gpu_pod(MIG_1G), HIGH),
        {"ckpt": (mig_node("ckpt"), (0.3,) * 8), "plain": (mig_node("plain"), (0.3,) * 8)},
        pods,
        {"ckpt": ["c-0", "c-1"], "plain": ["p-0"]},
    )
    assert list(outcome.kept) == ["ckpt"]


def test_a_victim_the_extender_does_not_know_counts_one_below_the_preemptor() -> None:
    # its priority is unknown: kube-scheduler may have chosen any pod below the preemptor's, so a candidate whose
    # known victims are all of a lower priority is cheaper
    pods = {**prioritised("a", 15, LOW, "a"), **prioritised("b", 16, MIDDLE, "b")}
    outcome = decide(
        with_priority(gpu_pod(MIG_1G), HIGH),
        {"a": (mig_node("a"), (0.3,) * 8), "b": (mig_node("b"), (0.3,) * 8)},
        pods,
        {"a": ["new-uid"], "b": ["b-0"]},
    )
    assert list(outcome.kept) == ["b"]
    assert f"at priority {HIGH - 1}" in outcome.dropped["a"].reason


def test_the_higher_priority_spare_victim_goes_back_first() -> None:
    # the pod needs a GPU and one more CPU: of two CPU holders proposed, the higher-priority one is spared,
    # though it is batch and the other training
    h100 = node("h", gpus={GPU: 2}, labels=H100, cpu="4")
    pods = {
        "gpu-holder": PodRecord("h", ((GPU, 1), ("cpu", 500)), True, RANK_BATCH, LOW),
        "cpu-batch": PodRecord("h", (("cpu", 1000),), True, RANK_BATCH, MIDDLE),
        "cpu-training": PodRecord("h", (("cpu", 1000),), True, RANK_TRAINING, LOW),
        "rest": PodRecord("h", ((GPU, 1), ("cpu", 1500)), True, RANK_TRAINING, HIGH),
    }
    outcome = decide(with_priority(gpu_pod(GPU, 1, "training"), HIGH), {"h": (h100, (0.5,) * 2)}, pods,
                     {"h": ["gpu-holder", "cpu-batch", "cpu-training"]})  # fmt: skip
    assert set(outcome.kept["h"].victims) == {"gpu-holder", "cpu-training"}


@pytest.mark.parametrize(
    ("cheaper", "costlier"),
    [
        ([(LOW, RANK_OTHER)] * 3, [(MIDDLE, RANK_BATCH)]),  # priority before the count and the class
        ([(LOW, RANK_BATCH), (LOW, RANK_TRAINING)], [(LOW, RANK_OTHER)]),  # then the class
        ([(MIDDLE, RANK_BATCH), (LOW, RANK_OTHER)], [(MIDDLE, RANK_BATCH)] * 2),  # then the count at the worst
    ],
)
def test_candidate_cost_orders_priority_then_class_then_count(
    cheaper: list[tuple[int, int]], costlier: list[tuple[int, int]]
) -> None:
    assert candidate_cost(cheaper, 0, 1.0) < candidate_cost(costlier, 0, 1.0)
    assert candidate_cost(cheaper, 5, 9.0) < candidate_cost(costlier, 0, 0.0)  # PDBs and work only break ties


# the wire format -----------------------------------------------------------------------------------------------

POD = {"metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"}, "spec": {"containers": []}}


def test_meta_victims_and_full_victims_both_parse_to_uids() -> None:
    meta = {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 1}}}
    assert parse_preemption_args(orjson.dumps(meta)).victims == {"n1": (("a", "b"), 1)}
    victim = {"metadata": {"name": "v", "namespace": "ml", "uid": "c"}}
    full_form = {
        "Pod": POD,
        "NodeNameToVictims": {"n2": {"Pods": [victim], "NumPDBViolations": 0}},
        "NodeNameToMetaVictims": None,
    }
    assert parse_preemption_args(orjson.dumps(full_form)).victims == {"n2": (("c",), 0)}


def test_the_result_names_victims_by_uid_as_kube_scheduler_reads_them() -> None:
    assert orjson.loads(preemption_result({"n1": (("a",), 2)})) == {
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}], "NumPDBViolations": 2}}
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"NodeNameToMetaVictims": {}}', "Pod must be a Pod object"),
        (b'{"Pod": {}}', "neither NodeNameToMetaVictims nor NodeNameToVictims"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": []}', "must be an object of node names"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}', "a victim without a uid"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [], "NumPDBViolations": "1"}}}', "NumPDBViolations"),
    ],
)
def test_a_malformed_body_is_refused_naming_the_field(body: bytes, message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        parse_preemption_args(body)


def test_more_candidates_than_the_extender_accepts_is_refused() -> None:
    many = {f"n{i}": {"Pods": [{"UID": "a"}]} for i in range(20)}
    with pytest.raises(ArgsError, match="20 nodes, more than the 10"):
        parse_preemption_args(orjson.dumps({"Pod": POD, "NodeNameToMetaVictims": many}), max_candidates=10)


# the route -----------------------------------------------------------------------------------------------------


def bound(name: str, node_name: str, resource: str, labels: dict[str, str]) -> dict[str, Any]:
    pod = gpu_pod(resource, 1, None, name=name)
    pod["metadata"]["labels"] = labels
    pod["spec"]["nodeName"] = node_name
    pod["status"] = {"phase": "Running"}
    return pod


async def test_the_route_answers_the_kept_candidates_and_counts_what_it_dropped(aiohttp_client: Any) -> None:
    nodes = [node("h1", gpus={GPU: 1}, labels=H100), node("h2", gpus={GPU: 1}, labels=H100)]
    pods = [
        bound("train", "h1", GPU, {"gpupack.io/workload": "training"}),
        bound("sweep", "h2", GPU, {"gpupack.io/workload": "batch"}),
    ]
    client = await aiohttp_client(make_app(extender_for(nodes, pods), registry()))
    args = {
        "Pod": gpu_pod(GPU, 1, "training", name="urgent"),
        "NodeNameToMetaVictims": {"h1": {"Pods": [{"UID": "uid-train"}]}, "h2": {"Pods": [{"UID": "uid-sweep"}]}},
    }
    answer = await client.post("/preempt", data=orjson.dumps(args))
    assert answer.status == 200
    assert await answer.json() == {
        "NodeNameToMetaVictims": {"h2": {"Pods": [{"UID": "uid-sweep"}], "NumPDBViolations": 0}}
    }
    metrics = await (await client.get("/metrics")).text()
    assert 'gpupack_extender_preempt_candidates_total{outcome="kept"} 1.0' in metrics
    assert 'gpupack_extender_preempt_candidates_total{outcome="costlier"} 1.0' in metrics


async def test_the_route_refuses_a_body_it_cannot_read_with_400_so_the_scheduler_skips_it(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_app(extender_for([]), registry()))
    answer = await client.post("/preempt", data=b"not json")
    assert answer.status == 400 and "not JSON" in await answer.text()


async def test_a_pod_it_cannot_read_gets_the_candidates_back_unchanged(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_app(extender_for([]), registry()))
    broken = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "lots"}}}]},
    }
    args = {"Pod": broken, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "a"}], "NumPDBViolations": 0}}}
    answer = await client.post("/preempt", data=orjson.dumps(args))
    assert answer.status == 200
    assert await answer.json() == {"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "a"}], "NumPDBViolations": 0}}}


# the preemptor's next filter -----------------------------------------------------------------------------------


async def preempted(aiohttp_client: Any) -> tuple[Any, Any]:
    """An extender whose cache holds one H100 node full with a batch pod, and the answer of a preemption there."""
    nodes = [node("h1", gpus={GPU: 1}, labels=H100)]
    extender = extender_for(nodes, [bound("sweep", "h1", GPU, {"gpupack.io/workload": "batch"})])
    client = await aiohttp_client(make_app(extender, registry()))
    args = {
        "Pod": gpu_pod(GPU, 1, "training", name="urgent"),
        "NodeNameToMetaVictims": {"h1": {"Pods": [{"UID": "uid-sweep"}]}},
    }
    answer = await client.post("/preempt", data=orjson.dumps(args))
    assert (await answer.json())["NodeNameToMetaVictims"] == {
        "h1": {"Pods": [{"UID": "uid-sweep"}], "NumPDBViolations": 0}
    }
    return client, extender


async def filtered(client: Any, name: str) -> dict[str, Any]:
    answer = await client.post(
        "/filter", data=orjson.dumps({"Pod": gpu_pod(GPU, 1, "training", name=name), "NodeNames": ["h1"]})
    )
    result: dict[str, Any] = await answer.json()
    return result


async def test_the_preemptor_passes_the_node_its_victims_leave_before_the_watch_shows_them_gone(
    aiohttp_client: Any,
) -> None:
    # kube-scheduler retries the preemptor as soon as its own cache has the victim gone; the extender's watch may
    # still hold it (460 ms late on a loaded real control plane): refusing h1 then made kube-scheduler preempt again
    # on another node, killing a pod for nothing.
    client, _ = await preempted(aiohttp_client)
    assert (await filtered(client, "urgent"))["NodeNames"] == ["h1"]


async def test_another_pod_still_counts_the_leaving_victim(aiohttp_client: Any) -> None:
    client, _ = await preempted(aiohttp_client)
    result = await filtered(client, "other")
    assert result["NodeNames"] == [] and "0 of 1 nvidia.com/gpu free" in result["FailedNodes"]["h1"]


async def test_the_record_ends_when_the_preemptor_is_seen_bound(aiohttp_client: Any) -> None:
    _, extender = await preempted(aiohttp_client)
    assert extender.state.leaving("uid-urgent", "h1")
    extender.state.upsert_pod("uid-urgent", "h1", ((GPU, 1),))
    assert not extender.state.leaving("uid-urgent", "h1") and extender.state.preempting_count() == 0


def test_a_record_expires_and_the_oldest_go_first_past_the_bound() -> None:
    state = ClusterState()
    state.upsert_pod("v", "h1", ((GPU, 1),))
    state.preempting("p", {"h1": ["v"]}, ttl=10, now=100.0)
    assert [r.node for r in state.leaving("p", "h1", now=105.0)] == ["h1"]
    assert state.leaving("p", "h1", now=111.0) == [] and state.preempting_count() == 0
    for i in range(PREEMPTING_MAX + 5):
        state.preempting(f"p{i}", {"h1": ["v"]}, now=100.0)
    assert state.preempting_count() == PREEMPTING_MAX
    assert state.leaving("p0", "h1", now=101.0) == [] and state.leaving(f"p{PREEMPTING_MAX + 4}", "h1", now=101.0)
