"""Where a window's usage comes from: a Protocol the report calls once per window (`gpupack.report.prometheus`,
`gpupack.report.nvidia_smi` implement it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpupack.core.thresholds import Thresholds
from gpupack.report.usage import Usage, UtilizationMetric, Window

Progress = Callable[[str, int, int], None]
"""Called as work goes on: (what, done, total), for the terminal's progress bar."""


class UsageSource(Protocol):
    """Reads what the GPUs did over one window; blocking; raises OSError or ValueError naming what failed."""

    def usage(
        self, window: Window, metric: UtilizationMetric, thresholds: Thresholds, progress: Progress | None = None
    ) -> Usage: ...
