"""`python -m gpupack.monitoring`: regenerate the shipped rule files (see `gpupack.monitoring.build`)."""

from __future__ import annotations

from gpupack.monitoring.build import ROOT, write

for path in write():
    print(path.relative_to(ROOT))
