"""Where the source checkout is: the files some tools default to live beside the package, not in it.

The synthetic day's scenario (`scenarios/`), the openb trace (`data/`) and the monitoring files that
`python -m gpupack.monitoring` writes (`manifests/`, `charts/`) belong to the repository. An installed gpupack has
none of them, so each caller names the file it missed and the flag that supplies it.
"""

from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
"""The root of the checkout this package was imported from (`gpupack/core/checkout.py` is two levels below it)."""
