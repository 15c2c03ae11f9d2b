"""What the extender derives for gpupack's order: pods' asks, each node's GPU layout, the typical shapes."""

from __future__ import annotations

from gpupack.extender.inventory import NodeRecord, node_from_json
from gpupack.extender.packing import Ask
from gpupack.extender.state import ClusterState
from gpupack.extender.typical import REFRESH_PODS, ShapeBook, ask_of, gpu_layout
from tests.extender_kit import A100_BALANCED, A100_BALANCED_GPUS, T4_SHARED, extender_for, gpu_pod, node, policy

SHARED = "nvidia.com/gpu.shared"
GPU = "nvidia.com/gpu"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def record(node_json: dict[str, object]) -> NodeRecord:
    return node_from_json(node_json, policy())


T4 = record(node("t4", gpus={SHARED: 16}, labels=T4_SHARED))  # 4 GPUs, 4 replicas each: a replica is 250 milli-GPU
H100_NODE = record(node("h100", gpus={GPU: 8}, labels=H100))
A100 = record(node("a100", gpus=A100_BALANCED_GPUS, labels=A100_BALANCED))


def test_asks_in_milli_gpu() -> None:
    assert ask_of({"cpu": 2000, SHARED: 1}, T4) == Ask(2000, 250, 1)
    assert ask_of({"cpu": 2000, SHARED: 2}, T4) == Ask(2000, 500, 1)
    assert ask_of({"cpu": 8000, GPU: 2}, H100_NODE) == Ask(8000, 1000, 2)
    assert ask_of({"cpu": 500, "memory": 10**9}, H100_NODE) == Ask(500, 0, 0)
    assert ask_of({"nvidia.com/mig-1g.5gb": 1}, A100) is None  # MIG geometry is scored elsewhere
    assert ask_of({SHARED: 1}, H100_NODE) is None  # no replicas offered there
    six = record(
        node(
            "six", gpus={SHARED: 12}, labels={**T4_SHARED, "nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "6"}
        )
    )
    assert ask_of({SHARED: 1}, six) == Ask(0, 166, 1)  # rounded down: a GPU holds its 6 replicas
    assert gpu_layout(six, [((SHARED, 1),)] * 6) == [4, 1000]
    assert ask_of({SHARED: 8}, six) == Ask(0, 1000, 2)  # more than a GPU's replicas: whole GPUs


def test_replicas_fill_the_fullest_gpu_and_whole_gpus_the_lowest_free_ones() -> None:
    replica, two = ((SHARED, 1),), ((SHARED, 2),)
    # 250, then 500 on the same GPU (fullest that fits), then 500 more does not fit there (250 left): next GPU.
    assert gpu_layout(T4, [replica, two, two]) == [250, 500, 1000, 1000]
    assert gpu_layout(T4, [replica, two, two, replica]) == [0, 500, 1000, 1000]
    assert gpu_layout(H100_NODE, [((GPU, 2),), (("cpu", 4000),), ((GPU, 3),)]) == [0] * 5 + [1000] * 3


def test_gpus_split_by_mig_offer_nothing_to_whole_or_time_sliced_pods() -> None:
    assert gpu_layout(A100, []) == [0] * 8


def test_typical_shapes_are_counted_from_the_running_pods_and_recounted_after_enough_changes() -> None:
    state = ClusterState()
    state.replace_nodes([T4, H100_NODE])
    for i in range(40):  # DaemonSet pods (one per node in a real cluster) are not shapes
        state.upsert_pod(f"ds{i}", T4.name, (("cpu", 100),), workload=False)
    for i in range(10):
        state.upsert_pod(f"r{i}", T4.name, (("cpu", 2000), (SHARED, 1)))
    for i in range(5):
        state.upsert_pod(f"w{i}", H100_NODE.name, (("cpu", 8000), (GPU, 1)))
    book = ShapeBook()
    book.refresh(state)
    assert book.version == 1
    assert book.shapes.keys == ((2000, 250, 1, ()), (8000, 1000, 1, ()))
    assert book.rho == (10 * 2000 + 5 * 8000) / (10 * 250 + 5 * 1000)
    for i in range(REFRESH_PODS - 1):
        state.upsert_pod(f"c{i}", H100_NODE.name, (("cpu", 1000),))
    book.refresh(state)
    assert book.version == 1  # not enough changes yet: the same shapes
    state.upsert_pod("last", H100_NODE.name, (("cpu", 1000),))
    book.refresh(state)
    assert book.version == 2 and (1000, 0, 0, ()) in book.shapes.keys
    state.replace_pods([])  # a re-list: counted again at once
    book.refresh(state)
    assert book.version == 3 and book.shapes.keys == ()


def test_given_shapes_are_never_recounted() -> None:
    state = ClusterState()
    state.replace_nodes([T4])
    book = ShapeBook(ShapeBook().shapes)
    for i in range(100):
        state.upsert_pod(f"r{i}", T4.name, (("cpu", 2000), (SHARED, 1)))
    book.refresh(state)
    assert book.version == 0 and book.shapes.keys == ()


def test_daemonset_pods_do_not_put_a_node_in_use() -> None:
    state = ClusterState()
    state.replace_nodes([T4])
    state.upsert_pod("exporter", T4.name, (("cpu", 100),), workload=False)
    state.upsert_pod("replica", T4.name, (("cpu", 2000), (SHARED, 1)))
    requests, workloads = state.bound_on(T4.name)
    assert len(requests) == 2 and workloads == 1


def test_a_snapshot_counts_assumed_replicas_on_top_of_the_bound_layout_until_they_expire() -> None:
    from gpupack.extender.live import EMPTY
    from gpupack.extender.verbs import View, snapshot

    state = ClusterState()
    state.replace_nodes([T4])
    state.upsert_pod("bound", T4.name, ((SHARED, 2),))
    view = View(state, EMPTY, policy())
    assert snapshot(T4, view, 0.0, 0.0).gpu_free == (500, 1000, 1000, 1000)
    state.assume("next", T4.name, {SHARED: 1}, ttl=30, now=100.0)
    snap = snapshot(T4, view, 110.0, 0.0)
    assert snap.gpu_free == (250, 1000, 1000, 1000) and snap.pods == 2
    assert snapshot(T4, view, 200.0, 0.0).gpu_free == (500, 1000, 1000, 1000)  # the assumption expired
    state.upsert_pod("bound", T4.name, ((SHARED, 3),))  # a bound pod changed: the kept layout is dropped
    assert snapshot(T4, view, 200.0, 0.0).gpu_free == (250, 1000, 1000, 1000)


def test_the_service_counts_pod_churn_at_most_once_per_interval_but_always_after_a_list() -> None:
    now = [0.0]
    state = ClusterState()
    state.replace_nodes([T4])
    book = ShapeBook(min_interval=60.0, clock=lambda: now[0])
    book.refresh(state)
    assert book.version == 1
    for i in range(REFRESH_PODS):
        state.upsert_pod(f"r{i}", T4.name, (("cpu", 2000), (SHARED, 1)))
    now[0] = 30.0
    book.refresh(state)
    assert book.version == 1  # enough changes, too soon
    now[0] = 61.0
    book.refresh(state)
    assert book.version == 2 and book.shapes.keys == ((2000, 250, 1, ()),)
    state.replace_pods([])
    book.refresh(state)
    assert book.version == 3  # a full list: at once


def _bound_at(name: str, replicas: int, scheduled: str) -> dict[str, object]:
    pod = gpu_pod(SHARED, replicas, name=name)
    pod["spec"]["nodeName"] = "t4"
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
    }
    return pod


def test_a_listed_node_is_rebuilt_in_the_order_its_pods_were_bound_not_the_list_order() -> None:
    # Bound: one replica (c), then two (b), then two (a); a list returns them by name: a, b, c.
    pods = [
        _bound_at("a", 2, "2026-11-29T10:00:02Z"),
        _bound_at("b", 2, "2026-11-29T10:00:01Z"),
        _bound_at("c", 1, "2026-11-29T10:00:00Z"),
    ]
    state = extender_for([node("t4", gpus={SHARED: 16}, labels=T4_SHARED)], pods).state
    requests, _ = state.bound_on("t4")
    assert gpu_layout(T4, requests) == [250, 500, 1000, 1000]  # replayed in list order it would be [0, 750, ...]
    assert gpu_layout(T4, list(reversed(requests))) == [0, 750, 1000, 1000]
