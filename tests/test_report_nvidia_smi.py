"""The nvidia-smi CSV reader on the guide's (docs/method.md) exact format: the header with units, `%` and `MiB`
suffixes, `[N/A]`,
blank lines, a restarted log, timestamps or the 5 s interval, a file cut mid-line; and errors naming file:line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpupack.core.thresholds import Thresholds
from gpupack.report.nvidia_smi import CsvError, NvidiaSmiLogs, node_file, read_log
from gpupack.report.usage import Window

HEADER = "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
A100 = "NVIDIA A100-SXM4-40GB"


def _log(path: Path, text: str, end: float = 1_000_000.0) -> Path:
    path.write_text(text)
    os.utime(path, (end, end))
    return path


def test_the_guides_format_gives_means_worked_out_by_hand(tmp_path: Path) -> None:
    # GPU 0: 12, 20, 40 % -> mean 24, p95 the highest of three; memory 30510 MiB of 40960 each time.
    # GPU 1: 0 % twice and [N/A] once -> mean 0 over the two numbers.
    text = HEADER + "".join(
        f"0, {A100}, {u} %, 30510 MiB, 40960 MiB\n1, {A100}, {v}, 100 MiB, 40960 MiB\n"
        for u, v in ((12, "0 %"), (20, "[N/A]"), (40, "0 %"))
    )
    logs = NvidiaSmiLogs([str(_log(tmp_path / "gpu-node-1.csv", text))])
    window = logs.covered()
    assert window.end == 1_000_005.0 and window.start == 1_000_000.0 - 2 * 5  # three rows 5 s apart
    usage = logs.usage(window, "gpu-util", Thresholds())
    first, second = usage.gpus
    assert (first.node, first.gpu, first.model) == ("gpu-node-1", "0", A100)
    assert first.util_mean == pytest.approx(24.0) and first.util_p95 == 40.0
    assert first.fb_used_mean == 30510.0 and first.fb_total == 40960.0
    assert first.held_idle == 0.0  # memory held (74 %) but compute above 10 % throughout
    assert second.util_mean == 0.0 and second.held_idle == 0.0  # computes nothing, holds no memory
    node = usage.nodes()["gpu-node-1"]
    assert node.gpus == 2 and node.util_mean == pytest.approx(12.0)
    assert node.fb_used_fraction == pytest.approx((30510 + 100) / (2 * 40960))
    assert usage.samples == 6


def test_memory_held_while_compute_is_idle_is_counted_per_sample(tmp_path: Path) -> None:
    rows = [("5 %", "36000 MiB"), ("2 %", "36000 MiB"), ("50 %", "36000 MiB"), ("1 %", "1000 MiB")]
    text = HEADER + "".join(f"0, {A100}, {u}, {m}, 40960 MiB\n" for u, m in rows)
    logs = NvidiaSmiLogs([f"n1={_log(tmp_path / 'x.csv', text)}"])
    (gpu,) = logs.usage(logs.covered(), "gpu-util", Thresholds()).gpus
    assert gpu.node == "n1" and gpu.held_idle == pytest.approx(2 / 4)  # rows 1 and 2: used >= 50 %, util < 10 %
    assert gpu.fb_used_max == 36000.0


def test_timestamps_date_the_rows_and_the_window_selects_them(tmp_path: Path) -> None:
    header = "timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    text = header + (
        "2026/11/30 10:00:00.000, 0, 80 %, 10 MiB, 100 MiB\n"
        "2026/11/30 10:30:00.000, 0, 60 %, 10 MiB, 100 MiB\n"
        "2026/11/30 11:10:00.500, 0, 10 %, 10 MiB, 100 MiB\n"
    )
    logs = NvidiaSmiLogs([str(_log(tmp_path / "n.csv", text))])
    start = 1796032800.0  # 2026-11-30T10:00:00Z
    usage = logs.usage(Window(start, start + 7200), "gpu-util", Thresholds())
    assert usage.gpus[0].util_mean == pytest.approx(50.0)
    assert usage.hourly["n"] == (70.0, 10.0)
    later = logs.usage(Window(start + 3600, start + 7200), "gpu-util", Thresholds())
    assert later.gpus[0].util_mean == 10.0


def test_blank_lines_a_repeated_header_and_a_line_cut_short_are_read_through(tmp_path: Path) -> None:
    text = HEADER + f"0, {A100}, 10 %, 1 MiB, 40960 MiB\n\n" + HEADER + f"0, {A100}, 30 %, 1 MiB, 40960 MiB\n0, NVI"
    logs = NvidiaSmiLogs([str(_log(tmp_path / "n.csv", text))])
    (gpu,) = logs.usage(logs.covered(), "gpu-util", Thresholds()).gpus
    assert gpu.util_mean == pytest.approx(20.0)


def test_fields_in_another_order_and_only_what_is_needed(tmp_path: Path) -> None:
    text = "utilization.gpu [%], index\n7 %, 0\n9 %, 0\n"
    logs = NvidiaSmiLogs([str(_log(tmp_path / "n.csv", text))])
    (gpu,) = logs.usage(logs.covered(), "gpu-util", Thresholds()).gpus
    assert gpu.util_mean == 8.0 and gpu.fb_total is None and gpu.fb_used_fraction is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (HEADER + f"0, {A100}, twelve %, 1 MiB, 2 MiB\n", "n.csv:2: 'twelve %' is not a number in %"),
        (HEADER + f"0, {A100}, 1 %, 1 GiB, 2 MiB\n", "n.csv:2: '1 GiB' is not a number in MiB"),
        (HEADER + f"0, {A100}, 1 %\n0, {A100}, 1 %, 1 MiB, 2 MiB\n", "n.csv:2: 3 fields where the header has 5"),
        (HEADER + f"x, {A100}, 1 %, 1 MiB, 2 MiB\n", "n.csv:2: GPU index 'x' is not a number"),
        (HEADER + f"0, {A100}, -5 %, 1 MiB, 2 MiB\n", "n.csv:2: '-5 %' is not a count or a percentage"),
        (HEADER + f"0, {A100}, nan %, 1 MiB, 2 MiB\n", "n.csv:2: 'nan %'"),
        ("name, memory.used [MiB]\nA, 1 MiB\n", "n.csv:1: the header has no index, utilization.gpu"),
        ("", "n.csv: empty"),
        ("timestamp, index, utilization.gpu [%]\nyesterday, 0, 1 %\n", "n.csv:2: 'yesterday' is not a timestamp"),
    ],
)
def test_a_line_that_does_not_read_is_an_error_naming_file_and_line(tmp_path: Path, text: str, named: str) -> None:
    path = _log(tmp_path / "n.csv", text)
    with pytest.raises(CsvError) as caught:
        NvidiaSmiLogs([str(path)]).covered()
    assert named in str(caught.value)


def test_two_logs_for_one_node_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CsvError, match="more than one log for node a"):
        NvidiaSmiLogs([f"a={tmp_path / 'x.csv'}", f"a={tmp_path / 'y.csv'}"])


def test_a_log_with_no_sample_says_so(tmp_path: Path) -> None:
    with pytest.raises(CsvError, match="no sample"):
        NvidiaSmiLogs([str(_log(tmp_path / "n.csv", HEADER))]).covered()


def test_node_names_come_from_the_argument_or_the_file_name() -> None:
    assert node_file("gpu-7=/var/log/smi.csv") == ("gpu-7", Path("/var/log/smi.csv"))
    assert node_file("/logs/gpu-8.csv") == ("gpu-8", Path("/logs/gpu-8.csv"))


def test_rows_without_timestamps_are_five_seconds_apart_ending_at_the_files_time() -> None:
    gpus = read_log(HEADER + f"0, {A100}, 1 %, 1 MiB, 2 MiB\n" * 3, "n.csv", end=100.0)
    assert [s[0] for s in gpus["0"].samples] == [90.0, 95.0, 100.0]
