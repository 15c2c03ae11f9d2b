"""Read the Alibaba GPU-sharing trace (cluster-trace-gpu-v2023, "openb") into typed records.

The CSVs stay where the user downloaded them (never copied into the repository); `default_trace_dir()` finds the
shared copy next to the checkout. All pod-list variants read the same way: the `multigpu*` files carry only the
first five columns, so the optional columns come back empty.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gpupack.core.checkout import REPOSITORY

MILLI = 1000
"""Milli-GPU in one GPU: a sharing pod asks for less than this on a single GPU."""

DEFAULT_NODE_LIST = "openb_node_list_gpu_node.csv"
"""The published protocol's cluster: the 1213 GPU nodes (the CPU-only nodes of `all_node` change every number)."""


class TraceError(ValueError):
    """A trace file is missing, lacks a column, or holds a row that breaks the schema."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One machine: CPU in milli-cores, memory in MiB, GPU count and model ("" on CPU-only nodes)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRecord:
    """One task. `gpu_milli` is the share of ONE GPU (< 1000 only for sharing pods, which ask for one GPU).

    `gpu_spec` lists the GPU models the pod accepts (empty: any model). The scheduling columns
    (qos, phase, times) are absent from the `multigpu*` files and read as None.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str | None = None
    pod_phase: str | None = None
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None

    @property
    def is_sharing(self) -> bool:
        """A fraction of one GPU, placed on a GPU that other pods may share."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """What FGD sees of the pod: (cpu_milli, gpu_milli, num_gpu, gpu_spec); memory plays no part in it."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpu, self.gpu_spec)

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU request in milli-GPU (what counts as arrived demand)."""
        return self.num_gpu * self.gpu_milli


def default_trace_dir() -> Path:
    """`data/alibaba-gpu-v2023/csv` of the repository (a source checkout; an installed gpupack has no trace)."""
    return REPOSITORY / "data/alibaba-gpu-v2023/csv"


def pod_list_path(trace_dir: Path, variant: str) -> Path:
    """The pod list of a variant: `default`, `gpushare40`, `multigpu20`, ... or a path to a CSV."""
    if variant.endswith(".csv"):
        return Path(variant)
    return trace_dir / f"openb_pod_list_{variant}.csv"


def pod_variants(trace_dir: Path) -> list[str]:
    """The pod-list variants present in a trace directory, sorted, `default` first."""
    names = sorted(p.stem.removeprefix("openb_pod_list_") for p in trace_dir.glob("openb_pod_list_*.csv"))
    return sorted(names, key=lambda n: n != "default")


def _rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of a CSV (plain lists: DictReader is several times slower on 10k rows).

    Raises TraceError naming the file for a missing file, text that is not UTF-8, a missing column, and a row
    with more or fewer fields than the header (a file cut short would otherwise shift or drop values silently).
    """
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = [row for row in reader if row]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: not a CSV trace file: {exc}") from exc
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise TraceError(f"{path}: line {number} has {len(row)} fields, the header {len(header)}: {row!r}")
    return header, rows


def _int(path: Path, row: list[str], index: int, header: list[str]) -> int:
    """A non-negative integer field (every count and size in the trace is one)."""
    try:
        value = int(row[index])
    except ValueError as exc:
        raise TraceError(f"{path}: row {row!r}: {header[index]} is not an integer") from exc
    if value < 0:
        raise TraceError(f"{path}: row {row!r}: {header[index]} is negative")
    return value


def _opt_int(path: Path, row: list[str], index: int | None, header: list[str]) -> int | None:
    if index is None or row[index] == "":
        return None
    return _int(path, row, index, header)


def _opt_str(row: list[str], index: int | None) -> str | None:
    if index is None:
        return None
    return row[index] or None


def read_nodes(path: Path) -> list[NodeRecord]:
    """Nodes of an `openb_node_list_*.csv`, in file order."""
    header, rows = _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    sn, cpu, mem, gpu, model = (header.index(c) for c in ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    if not rows:
        raise TraceError(f"{path}: the node list has no nodes")
    return [
        NodeRecord(
            row[sn],
            _int(path, row, cpu, header),
            _int(path, row, mem, header),
            _int(path, row, gpu, header),
            row[model],
        )
        for row in rows
    ]


def read_pods(path: Path) -> list[PodRecord]:
    """Pods of an `openb_pod_list_*.csv`, in file order, CPU-only pods included.

    Raises TraceError on a row whose GPU request breaks the schema (a fraction of a GPU on more than one GPU,
    or more than one GPU's worth per GPU), because the fit rules would silently misplace it.
    """
    header, rows = _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    name, cpu, mem, num, milli = (header.index(c) for c in ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    optional = {c: header.index(c) if c in header else None for c in _OPTIONAL}
    if not rows:
        raise TraceError(f"{path}: the pod list has no pods")
    pods: list[PodRecord] = []
    for row in rows:
        num_gpu, gpu_milli = _int(path, row, num, header), _int(path, row, milli, header)
        if num_gpu == 0:
            gpu_milli = 0  # the authors' YAML drops the GPU annotations of CPU-only pods
        elif not 0 < gpu_milli <= MILLI or (gpu_milli < MILLI and num_gpu != 1):
            raise TraceError(f"{path}: {row[name]}: {num_gpu} GPU(s) x {gpu_milli} milli is not a valid request")
        spec = _opt_str(row, optional["gpu_spec"]) if num_gpu else None
        pods.append(
            PodRecord(
                name=row[name],
                cpu_milli=_int(path, row, cpu, header),
                memory_mib=_int(path, row, mem, header),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=tuple(m for m in spec.split("|") if m) if spec else (),
                qos=_opt_str(row, optional["qos"]),
                pod_phase=_opt_str(row, optional["pod_phase"]),
                creation_time=_opt_int(path, row, optional["creation_time"], header),
                deletion_time=_opt_int(path, row, optional["deletion_time"], header),
                scheduled_time=_opt_int(path, row, optional["scheduled_time"], header),
            )
        )
    return pods


_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
