"""Folding DCGM series into per-GPU utilization, the age of the data, and the static snapshot source."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE, node_of
from gpupack.core.policy import MetricsPolicy
from gpupack.extender.live import Series, aggregate
from gpupack.extender.sources import StaticSource
from gpupack.testing.dcgm import Gpu, MigGpu, MigInstance, Node, Workload, exposition

NOW = 1_800_000_000.0


def s(signal: str, value: float, gpu: str = "0", at: float = NOW, **labels: str) -> Series:
    """One sample on node `n1` (override with Hostname=/hostname=/... labels)."""
    base: dict[str, str] = {"gpu": gpu, "UUID": f"GPU-{gpu}", "device": f"nvidia{gpu}", "modelName": "NVIDIA A100"}
    if not any(k in labels for k in ("Hostname", "hostname", "node")):
        base["hostname"] = "n1"
    return Series(signal, {**base, **labels}, value, at)


def mig(activity: float, profile: str, instance: str, gpu: str = "0") -> Series:
    return s(GR_ENGINE_ACTIVE, activity, gpu, GPU_I_PROFILE=profile, GPU_I_ID=instance)


def utils(series: list[Series], node: str = "n1", node_label: str | None = None) -> dict[str, float | None]:
    live = aggregate(series, node_label, NOW)
    return {index: g.util for index, g in live.nodes.get(node, {}).items()}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, 0.0), (37.0, 0.37), (100.0, 1.0), (140.0, 1.0), (-3.0, 0.0)],
)
def test_whole_gpu_util_in_percent_becomes_a_fraction(value: float, expected: float) -> None:
    assert utils([s(GPU_UTIL, value)]) == {"0": pytest.approx(expected)}


@pytest.mark.parametrize(
    ("instances", "expected"),
    [
        ([mig(1.0, "7g.80gb", "0")], 1.0),
        ([mig(1.0, "3g.40gb", "1"), mig(0.5, "2g.20gb", "2")], (3 * 1.0 + 2 * 0.5) / 7),
        ([mig(0.8, "1g.10gb", str(i)) for i in range(7)], 0.8),
        ([mig(0.7, "1g.10gb+me", "9")], 0.1),
        ([mig(0.0, "3g.40gb", "1"), mig(0.0, "4g.40gb", "2")], 0.0),
    ],
    ids=["one-7g", "3g-and-2g", "seven-1g", "media-extension", "idle"],
)
def test_mig_gpu_is_its_instances_activity_weighted_by_compute_slices_over_seven(
    instances: list[Series], expected: float
) -> None:
    assert utils(instances) == {"0": pytest.approx(expected)}


def test_mig_instances_count_per_physical_gpu() -> None:
    series = [mig(1.0, "3g.40gb", "1", gpu="0"), mig(1.0, "7g.80gb", "0", gpu="1")]
    assert utils(series) == {"0": pytest.approx(3 / 7), "1": pytest.approx(1.0)}


@pytest.mark.parametrize("gpu_util_first", [True, False])
def test_gpu_util_wins_over_engine_activity_for_a_whole_gpu_in_either_order(gpu_util_first: bool) -> None:
    pair = [s(GPU_UTIL, 80.0), s(GR_ENGINE_ACTIVE, 0.2)]
    assert utils(pair if gpu_util_first else pair[::-1]) == {"0": pytest.approx(0.8)}


def test_engine_activity_stands_in_for_a_whole_gpu_without_gpu_util() -> None:
    assert utils([s(GR_ENGINE_ACTIVE, 0.45)]) == {"0": pytest.approx(0.45)}


@pytest.mark.parametrize("host_label", ["Hostname", "hostname"])
def test_both_host_label_spellings_name_the_node(host_label: str) -> None:
    series = [s(GPU_UTIL, 50.0, **{host_label: "worker-7"})]
    assert utils(series, node="worker-7") == {"0": pytest.approx(0.5)}
    assert node_of(series[0].labels, None) == "worker-7"


def test_old_and_new_exporters_in_one_read_give_two_nodes() -> None:
    live = aggregate([s(GPU_UTIL, 10.0, Hostname="old"), s(GPU_UTIL, 90.0, hostname="new")], None, NOW)
    assert sorted(live.nodes) == ["new", "old"]


def test_the_admins_node_label_wins_over_the_host_label() -> None:
    # Without NODE_NAME the exporter's host label holds its own pod name; a relabelling puts the node in `node`.
    series = [
        s(GPU_UTIL, 30.0, Hostname="dcgm-exporter-x7k2p", node="worker-1"),
        s(GPU_UTIL, 60.0, gpu="1", hostname="dcgm-exporter-x7k2p"),
    ]
    live = aggregate(series, "node", NOW)
    assert {n: {i: g.util for i, g in gpus.items()} for n, gpus in live.nodes.items()} == {
        "worker-1": {"0": pytest.approx(0.3)}
    }


def test_a_gpu_a_dra_driver_publishes_is_its_nodes_by_uuid_before_any_label() -> None:
    by_uuid = {"GPU-0": "dra-node"}
    assert node_of({"UUID": "GPU-0", "node": "n9", "hostname": "exporter-pod"}, "node", by_uuid) == "dra-node"
    assert node_of({"UUID": "GPU-7", "node": "n9"}, "node", by_uuid) == "n9"  # not a DRA GPU: the labels decide
    live = aggregate([s(GPU_UTIL, 40.0, hostname="exporter-pod")], None, NOW, by_uuid)
    assert set(live.nodes) == {"dra-node"}


def test_series_without_node_or_gpu_are_skipped() -> None:
    no_gpu = Series(GPU_UTIL, {"hostname": "n1"}, 50.0, NOW)
    no_node = Series(GPU_UTIL, {"gpu": "0"}, 50.0, NOW)
    assert aggregate([no_gpu, no_node], None, NOW).nodes == {}


@pytest.mark.parametrize(
    ("labels", "pods"),
    [
        ({"pod": "llm-0", "namespace": "ml"}, {"llm-0"}),
        ({"exported_pod": "llm-0", "exported_namespace": "ml", "pod": "dcgm-exporter-x7k2p"}, {"llm-0"}),
        ({}, set()),
        ({"pod": ""}, set()),
    ],
    ids=["pod", "exported_pod-through-servicemonitor", "no-workload", "empty-pod"],
)
def test_the_gpus_pod_comes_from_exported_pod_else_pod(labels: Mapping[str, str], pods: set[str]) -> None:
    live = aggregate([s(GPU_UTIL, 50.0, **labels)], None, NOW)
    assert live.nodes["n1"]["0"].pods == pods


def test_the_exporters_own_pod_through_a_servicemonitor_is_not_a_workload() -> None:
    # honorLabels false: the target's `pod` (the exporter) stays, the exporter's `pod` becomes `exported_pod`;
    # an idle GPU's series carries only the target's.
    target = {"pod": "dcgm-exporter-x7k2p", "namespace": "gpu-operator", "endpoint": "gpu-metrics"}
    series = [s(GPU_UTIL, 50.0, "0", exported_pod="llm-0", **target), s(GPU_UTIL, 0.0, "1", **target)]
    live = aggregate(series, None, NOW)
    assert {i: g.pods for i, g in live.nodes["n1"].items()} == {"0": {"llm-0"}, "1": set()}


def test_memory_of_mig_instances_adds_up_per_gpu() -> None:
    series = [
        s(FB_USED, 1000.0, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
        s(FB_USED, 500.0, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"),
        s(FB_FREE, 39000.0, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
    ]
    gpu = aggregate(series, None, NOW).nodes["n1"]["0"]
    assert (gpu.fb_used, gpu.fb_free) == (1500.0, 39000.0)


def test_fresh_utils_keeps_gpus_whose_newest_sample_is_within_max_age() -> None:
    live = aggregate(
        [s(GPU_UTIL, 10.0, "0", at=NOW - 10), s(GPU_UTIL, 20.0, "1", at=NOW - 100), s(FB_USED, 5.0, "1", at=NOW - 50)],
        None,
        NOW,
    )
    assert live.fresh_utils("n1", NOW, max_age=30) == (pytest.approx(0.1),)
    assert live.fresh_utils("n1", NOW, max_age=50) == (pytest.approx(0.1), pytest.approx(0.2))
    assert live.fresh_utils("n1", NOW + 60, max_age=30) == ()
    assert live.fresh_utils("elsewhere", NOW, max_age=30) == ()
    assert live.newest() == NOW - 10


def test_a_gpu_with_only_memory_series_has_no_utilization() -> None:
    live = aggregate([s(FB_USED, 5.0)], None, NOW)
    assert live.nodes["n1"]["0"].util is None
    assert live.fresh_utils("n1", NOW, max_age=30) == ()


# StaticSource: an exporter's /metrics text saved to a file.

SNAPSHOT = [
    Node("h100-a", [Gpu(37.0, workload=Workload("llm-0", "ml")), Gpu(0.0)], host_label="Hostname"),
    Node(
        "a100-b",
        [MigGpu([MigInstance("3g.40gb", 1, 0.5, workload=Workload("chat-1")), MigInstance("4g.40gb", 2, 0.25)])],
        model="NVIDIA A100-SXM4-80GB",
        host_label="hostname",
        driver_version=None,
    ),
]


def read_static(path: Path) -> tuple[dict[str, dict[str, float | None]], list[Series]]:
    series = StaticSource(path).read(MetricsPolicy())
    live = aggregate(series, None, NOW)
    return {n: {i: g.util for i, g in gpus.items()} for n, gpus in live.nodes.items()}, series


def test_static_snapshot_gives_whole_and_mig_gpus_of_both_exporter_generations(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(exposition(SNAPSHOT) + '# TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK{gpu="0"} 1980\n')
    utils_by_node, series = read_static(path)
    assert utils_by_node == {
        "h100-a": {"0": pytest.approx(0.37), "1": pytest.approx(0.0)},
        "a100-b": {"0": pytest.approx((3 * 0.5 + 4 * 0.25) / 7)},
    }
    assert {x.signal for x in series} == {GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE}
    assert not any(GPU_UTIL == x.signal and "GPU_I_ID" in x.labels for x in series)


def test_static_samples_without_timestamp_are_as_old_as_the_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(exposition(SNAPSHOT))
    os.utime(path, (NOW - 42, NOW - 42))
    _, series = read_static(path)
    assert {x.at for x in series} == {NOW - 42}


def test_static_samples_with_timestamps_keep_them(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(exposition(SNAPSHOT, timestamp=NOW - 7.5))
    os.utime(path, (NOW, NOW))
    _, series = read_static(path)
    assert {x.at for x in series} == {NOW - 7.5}
    live = aggregate(series, None, NOW)
    assert live.fresh_utils("h100-a", NOW, max_age=5) == ()
    assert live.fresh_utils("h100-a", NOW, max_age=10) == (pytest.approx(0.37), 0.0)


def test_static_source_raises_on_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        StaticSource(tmp_path / "absent.txt").read(MetricsPolicy())


def test_static_source_raises_on_text_that_is_not_exposition(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text("DCGM_FI_DEV_GPU_UTIL{gpu=0 oops\n")
    with pytest.raises(ValueError):
        StaticSource(path).read(MetricsPolicy())


def test_static_source_parses_again_only_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(exposition(SNAPSHOT))
    source = StaticSource(path)
    assert source.read(MetricsPolicy())
    assert source.read(MetricsPolicy()) is None  # unchanged: the snapshot in force stays
    assert source.read(MetricsPolicy(), again=True)  # unless asked: a new UUID map gives the same series new nodes
    path.write_text(exposition(SNAPSHOT, timestamp=NOW))
    again = source.read(MetricsPolicy())
    assert again and {x.at for x in again} == {NOW}


async def test_stale_data_is_logged_once_when_it_starts_and_when_it_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gpupack.extender.sources import LiveMetricsCache

    path = tmp_path / "metrics.txt"
    path.write_text(exposition(SNAPSHOT))
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    policy = MetricsPolicy(max_age_seconds=30)
    cache = LiveMetricsCache(StaticSource(path), lambda: policy, lambda ok: None)
    with caplog.at_level("INFO", logger="gpupack.extender.sources"):
        assert await cache.refresh()  # samples as old as the file: long stale
        assert cache.check_stale()
        os.utime(path, None)  # rewritten now: fresh
        assert await cache.refresh()
        assert not cache.check_stale()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("are stale" in m for m in messages) == 1
    assert sum("fresh again" in m for m in messages) == 1
