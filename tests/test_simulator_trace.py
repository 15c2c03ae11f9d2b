"""The trace reader on real rows of the shared Alibaba trace (never copied into the repository)."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pytest

from gpupack.simulator.trace import (
    DEFAULT_NODE_LIST,
    NodeRecord,
    PodRecord,
    TraceError,
    default_trace_dir,
    pod_list_path,
    pod_variants,
    read_nodes,
    read_pods,
)

TRACE = Path(__file__).resolve().parents[1] / "data/alibaba-gpu-v2023/csv"


@functools.cache
def pods_by_name(variant: str) -> dict[str, PodRecord]:
    return {p.name: p for p in read_pods(pod_list_path(TRACE, variant))}


def test_default_trace_dir_is_the_copy_in_the_repository() -> None:
    assert default_trace_dir() == TRACE


def test_gpu_node_list_is_the_published_cluster() -> None:
    nodes = read_nodes(TRACE / DEFAULT_NODE_LIST)
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert nodes[0] == NodeRecord("openb-node-0000", 64000, 262144, 2, "P100")
    assert Counter(n.model for n in nodes)["T4"] == 404


def test_all_node_list_reads_cpu_only_nodes_with_an_empty_model() -> None:
    nodes = read_nodes(TRACE / "openb_node_list_all_node.csv")
    cpu_only = [n for n in nodes if n.gpus == 0]
    assert len(nodes) == 1523 and len(cpu_only) == 310
    assert {n.model for n in cpu_only} == {""}


@pytest.mark.parametrize(
    ("name", "cpu", "mem", "num_gpu", "milli", "sharing", "demand"),
    [
        ("openb-pod-0000", 12000, 16384, 1, 1000, False, 1000),  # one whole GPU
        ("openb-pod-0001", 6000, 12288, 1, 460, True, 460),  # a sharing pod
        ("openb-pod-0017", 88000, 327680, 8, 1000, False, 8000),  # a multi-GPU pod
        ("openb-pod-0005", 20000, 65536, 0, 0, False, 0),  # a CPU-only pod
    ],
)
def test_default_pods_read_their_requests(
    name: str, cpu: int, mem: int, num_gpu: int, milli: int, sharing: bool, demand: int
) -> None:
    pod = pods_by_name("default")[name]
    assert (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli) == (cpu, mem, num_gpu, milli)
    assert pod.is_sharing is sharing
    assert pod.gpu_request_milli == demand
    assert pod.gpu_spec == ()


def test_default_trace_totals_match_the_source_description() -> None:
    pods = list(pods_by_name("default").values())
    assert len(pods) == 8152
    assert sum(p.gpu_request_milli for p in pods) == 6_086_800
    assert sum(p.is_sharing for p in pods) == 3078


def test_gpu_spec_lists_the_accepted_models() -> None:
    pods = pods_by_name("gpuspec25")
    assert pods["openb-pod-0008"].gpu_spec == ("G2",)
    assert pods["openb-pod-0035"].gpu_spec == ("V100M16", "V100M32")
    assert pods_by_name("gpuspec05")["openb-pod-0035"].gpu_spec == ()


def test_scheduling_columns_are_read_when_present() -> None:
    pod = pods_by_name("default")["openb-pod-0017"]
    assert (pod.qos, pod.pod_phase) == ("Burstable", "Succeeded")
    assert (pod.creation_time, pod.deletion_time, pod.scheduled_time) == (9437497, 10769854, 9437497)


def test_multigpu_files_have_five_columns_and_read_the_rest_as_empty() -> None:
    pods = pods_by_name("multigpu20")
    assert len(pods) == 8324
    pod = pods["openb-pod-0017"]
    assert (pod.num_gpu, pod.gpu_milli, pod.gpu_spec, pod.qos, pod.creation_time) == (8, 1000, (), None, None)


def test_variants_are_listed_default_first_and_each_format_reads() -> None:
    variants = pod_variants(TRACE)
    assert variants[0] == "default" and len(variants) == 19
    assert len(pods_by_name("cpu235")) == 9240 and len(pods_by_name("multigpu40")) == 8746


def test_missing_file_and_bad_rows_raise_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        read_pods(tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,2,500\n")
    with pytest.raises(TraceError, match="not a valid request"):
        read_pods(bad)
    bad.write_text("name,cpu_milli,memory_mib\np,1000,10\n")
    with pytest.raises(TraceError, match="missing column"):
        read_pods(bad)


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("p,1000,10,1,1000,5\nq,1000,10,1\n", r"line 3 has 4 fields, the header 6"),  # a file cut short
        ("p,1000,10,1,1000,5,extra\n", r"line 2 has 7 fields"),
        ("p,-5000,10,0,0,5\n", r"cpu_milli is negative"),
        ("p,1000,10,-2,1000,5\n", r"num_gpu is negative"),
        ("p,1000,ten,0,0,5\n", r"memory_mib is not an integer"),
        ("p,1000,10,0,0,xyz\n", r"creation_time is not an integer"),
        ("", r"the pod list has no pods"),
    ],
)
def test_a_malformed_pod_list_names_the_file_and_what_is_wrong(tmp_path: Path, rows: str, message: str) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text(POD_HEADER + rows)
    with pytest.raises(TraceError, match=message) as caught:
        read_pods(bad)
    assert str(bad) in str(caught.value)


def test_a_malformed_node_list_names_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.csv"
    for rows, message in [
        ("n1,96000,786432,8\n", "line 2 has 4 fields"),  # the model column missing from a row
        ("n1,96000,786432,-3,V100M32\n", "gpu is negative"),
        ("", "the node list has no nodes"),
    ]:
        bad.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + rows)
        with pytest.raises(TraceError, match=message):
            read_nodes(bad)
    bad.write_bytes(b"\xe2\x28\xa1 not text")
    with pytest.raises(TraceError, match="not a CSV trace file"):
        read_nodes(bad)
