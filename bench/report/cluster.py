"""The benchmark's cluster: `nodes` GPU nodes of `gpus` GPUs each over a week, as `gpupack.testing.history` nodes.

Each whole GPU follows a daily cycle around its own level with per-minute noise (GPU_UTIL in whole percent, as
DCGM writes it; engine activity a GPU-specific fraction of it, since GPU_UTIL overstates use), and runs a pod per
stint of one to three days (a new series each time), some GPUs idle between pods, some holding their memory while
idle. A tenth of the nodes (`mig_every`) have MIG GPUs, cut into 3g.40gb + 2g.20gb + 2g.20gb. Values are
functions of time seeded per device, so a chunk of the week is the same whichever file it is written to.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import numpy.typing as npt

from gpupack.core.dcgm import FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE
from gpupack.testing.dcgm import HostLabel, Workload
from gpupack.testing.history import Device, HistoryNode, Stint, Times, Values

DAY = 86400.0
H100_MIB = 81559.0
MIG_LAYOUT = (("3g.40gb", 1, 40448.0), ("2g.20gb", 5, 20096.0), ("2g.20gb", 6, 20096.0))
"""(profile, GPU_I_ID, MiB) of each MIG GPU's instances."""


def _noise(seed: int, times: Times, scale: float) -> npt.NDArray[np.float64]:
    # Seeded by the device and the first time, so the same chunk of time always draws the same noise.
    rng = np.random.default_rng([seed, int(times[0]) if len(times) else 0])
    return rng.normal(0.0, scale, len(times))


def _util(seed: int, level: float, swing: float, phase: float) -> Values:
    def values(times: Times) -> npt.NDArray[np.float64]:
        cycle = np.sin(2 * np.pi * (times / DAY + phase))
        return np.clip(np.round(level + swing * cycle + _noise(seed, times, 4.0)), 0, 100)

    return values


def _scaled(values: Values, factor: float, digits: int = 3) -> Values:
    return lambda times: np.round(values(times) * factor, digits)


def _memory(stints: list[tuple[float, float]], total: float) -> tuple[Values, Values]:
    """FB used and free: each stint's (start, MiB used) from its start on."""

    def used(times: Times) -> npt.NDArray[np.float64]:
        out = np.zeros(len(times))
        for start, mib in stints:
            out[times >= start] = mib
        return out

    return used, lambda times: total - used(times)


def _stints(rnd: random.Random, start: float, end: float, pod: str) -> tuple[list[Stint], list[tuple[float, float]]]:
    """Pods of one to three days, a quarter of the gaps idle; with the framebuffer each holds."""
    stints: list[Stint] = []
    memory: list[tuple[float, float]] = []
    at, n = start - DAY, 0
    while at < end:
        if rnd.random() < 0.25:
            stints.append(Stint(at, None))
            memory.append((at, 0.0))
        else:
            stints.append(Stint(at, Workload(f"{pod}-{n}", rnd.choice(("ml", "search", "batch")))))
            memory.append((at, float(rnd.randrange(8000, 76000, 1000))))
        n += 1
        at += rnd.uniform(1.0, 3.0) * DAY
    return stints, memory


def _whole(rnd: random.Random, seed: int, index: int, start: float, end: float, pod: str) -> Device:
    held_idle = rnd.random() < 0.1
    level = (
        rnd.uniform(0, 8) if held_idle else rnd.choice((rnd.uniform(2, 15), rnd.uniform(20, 60), rnd.uniform(60, 95)))
    )
    util = _util(seed, level, rnd.uniform(0, 15), rnd.random())
    stints, memory = _stints(rnd, start, end, pod)
    if held_idle:
        memory = [(at, max(mib, 60000.0)) for at, mib in memory]
    used, free = _memory(memory, H100_MIB)
    signals = {
        GPU_UTIL: util,
        GR_ENGINE_ACTIVE: _scaled(util, rnd.uniform(0.2, 0.9) / 100),
        FB_USED: used,
        FB_FREE: free,
    }
    return Device(index, signals, stints=tuple(stints))


def _mig(rnd: random.Random, seed: int, index: int, start: float, end: float, pod: str) -> list[Device]:
    devices = []
    for n, (profile, gid, mib) in enumerate(MIG_LAYOUT):
        activity = _scaled(_util(seed * 8 + n, rnd.uniform(5, 80), rnd.uniform(0, 15), rnd.random()), 0.01)
        stints, memory = _stints(rnd, start, end, f"{pod}-{gid}")
        used, free = _memory([(at, min(m, mib * 0.95)) for at, m in memory], mib)
        signals = {GR_ENGINE_ACTIVE: activity, FB_USED: used, FB_FREE: free}
        devices.append(Device(index, signals, mig=(profile, gid), stints=tuple(stints)))
    return devices


def cluster(nodes: int, gpus: int, start: float, end: float, mig_every: int = 10, seed: int = 1) -> list[HistoryNode]:
    """The nodes `gpu-node-0000`..., every `mig_every`-th with MIG GPUs (0: none), half of the rest on exporters
    writing `Hostname` (before dcgm-exporter #655)."""
    rnd = random.Random(seed)
    out = []
    for n in range(nodes):
        name = f"gpu-node-{n:04d}"
        mig = mig_every > 0 and n % mig_every == mig_every - 1
        devices: list[Device] = []
        for index in range(gpus):
            device_seed = zlib.crc32(f"{seed}/{name}/{index}".encode())
            pod = f"job-{n:04d}-{index}"
            if mig:
                devices += _mig(rnd, device_seed, index, start, end, pod)
            else:
                devices.append(_whole(rnd, device_seed, index, start, end, pod))
        model = "NVIDIA A100-SXM4-80GB" if mig else "NVIDIA H100 80GB HBM3"
        host: HostLabel = "Hostname" if n % 2 else "hostname"
        out.append(HistoryNode(name, devices, model=model, host_label=host))
    return out
