"""Read what a developer asked for from the pod's `gpupack.io/*` labels, or say precisely what is wrong.

An invalid value is refused at admission (HTTP 400 in the response status) with the label, the value and the
valid values, because a pod that silently gets the wrong GPU is worse than a pod that is not created.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Literal, cast

from gpupack.core import contract
from gpupack.core.k8s import Pod
from gpupack.core.policy import Sharing, WorkloadClass
from gpupack.core.quantity import QuantityError, parse_quantity
from gpupack.core.validation import quoted

Latency = Literal["critical", "tolerant"]
MAX_GPUS = contract.MAX_GPUS
_GPU_DIGITS = len(str(MAX_GPUS))


class LabelError(ValueError):
    """An opted-in pod carries a gpupack label or annotation with a value that cannot be used."""

    def __init__(self, label: str, value: str, valid: str) -> None:
        super().__init__(f"{label}={quoted(value)} is not valid: use {valid}")
        self.label = label
        self.value = value


@dataclass(frozen=True, slots=True)
class WorkloadRequest:
    """The developer's request, validated. None means "not said": the class default applies."""

    workload: WorkloadClass
    gpu_memory: Decimal | None = None
    gpus: int | None = None
    latency: Latency | None = None
    sharing: Sharing | None = None
    checkpoint: bool = False


def _choice(labels: dict[str, str], label: str, valid: tuple[str, ...]) -> str | None:
    value = labels.get(label)
    if value is None:
        return None
    if value not in valid:
        raise LabelError(label, value, " | ".join(valid))
    return value


@lru_cache(maxsize=256)
def _memory(value: str) -> Decimal:
    """The quantity of a `gpu-memory` value, 0 when it is not one.

    Cached: the pods of one Deployment all carry the same value, and parsing a quantity (a regex and Decimal
    arithmetic) is a visible part of an admission. Decimals are immutable, so sharing the result is safe.
    """
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)


def _gpu_memory(pod: Pod) -> Decimal | None:
    # A label is the contract; an annotation is accepted too, because some tools only let users set those.
    value = pod.labels.get(contract.LABEL_GPU_MEMORY, pod.annotations.get(contract.LABEL_GPU_MEMORY))
    if value is None:
        return None
    memory = _memory(value)
    if memory <= 0:
        raise LabelError(contract.LABEL_GPU_MEMORY, value, "a positive memory quantity such as 8Gi, 20Gi or 40G")
    return memory


def _gpus(labels: dict[str, str]) -> int | None:
    value = labels.get(contract.LABEL_GPUS)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= _GPU_DIGITS) or not 1 <= int(value) <= MAX_GPUS:
        # (isascii first: "²".isdigit() is true)
        raise LabelError(contract.LABEL_GPUS, value, f"a whole number of GPUs from 1 to {contract.MAX_GPUS}")
    return int(value)


def read_request(pod: Pod, default_class: WorkloadClass) -> WorkloadRequest:
    """The validated request of an opted-in pod; `default_class` applies when the pod has no workload label.

    Raises LabelError for an unknown class, a malformed quantity or count, an unknown latency, sharing or
    checkpoint value, or labels that contradict each other.
    """
    labels = pod.labels
    chosen = _choice(labels, contract.LABEL_WORKLOAD, contract.WORKLOAD_CLASSES)
    workload = cast("WorkloadClass", chosen or default_class)
    latency = cast("Latency | None", _choice(labels, contract.LABEL_LATENCY, contract.LATENCIES))
    sharing = cast("Sharing | None", _choice(labels, contract.LABEL_SHARING, contract.SHARING_MODES))
    checkpoint = _choice(labels, contract.LABEL_CHECKPOINT, ("true", "false")) == "true"
    gpus = _gpus(labels)
    if latency == "critical" and sharing == "time-slicing":
        raise LabelError(
            contract.LABEL_SHARING, "time-slicing", f"mig or exclusive with {contract.LABEL_LATENCY}=critical"
        )
    if gpus is not None and gpus > 1 and sharing in ("mig", "time-slicing"):
        raise LabelError(contract.LABEL_GPUS, str(gpus), f"1 with {contract.LABEL_SHARING}={sharing}, or exclusive")
    return WorkloadRequest(workload, _gpu_memory(pod), gpus, latency, sharing, checkpoint)
