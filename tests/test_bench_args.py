"""The benchmarks refuse counts and rates that would divide by zero or never finish, naming the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "flags", "message"),
    [
        ("bench.webhook", ["--rate", "0"], "argument --rate: 0 must be a number greater than zero"),
        ("bench.webhook", ["--duration", "-1"], "argument --duration: -1 must be at least 1"),
        ("bench.extender", ["--rounds", "0"], "argument --rounds: 0 must be at least 1"),
        ("bench.extender", ["--rate", "nan"], "argument --rate: nan must be a number greater than zero"),
        ("bench.simulator", ["--seeds", "0"], "argument --seeds: 0 must be at least 1"),
        ("bench.simulator", ["--variant", "nope"], "--variant nope: no pod list at"),
    ],
)
def test_a_benchmark_refuses_a_bad_setting_before_starting(module: str, flags: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
