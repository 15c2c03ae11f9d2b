"""What the DCGM exporter writes, and how its series become a node, a pod and a GPU's busy fraction.

The one owner of DCGM's names (docs/platform/dcgm.md): the signals gpupack reads, the labels on their series, the
host label that names the node (`Hostname` before dcgm-exporter #655, `hostname` after), the pod labels
(`exported_pod` through a ServiceMonitor, else `pod`) and the exporter's own pods among them, and the fold of MIG
instances into their GPU. The extender's live view, the report, the savings replay, the recording rules and the
test exporter all ask this module, in Python and in PromQL, so none of them can count an A30 as 7 slices.

The fold: DCGM reports no `DCGM_FI_DEV_GPU_UTIL` for MIG instances, and each instance's
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` is relative to the instance (dcgm-exporter #216, #430). A GPU's busy fraction is
the sum over its instances of activity times the instance's share of the GPU's compute slices
(`gpupack.core.gpus.catalog.instance_slices`): a busy A30 `4g.24gb` is a busy GPU, a busy A100 `3g.20gb` 3/7 of one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Final

from gpupack.core.gpus.catalog import SEVEN_SLICES, instance_slices, slice_table

GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
"""Percent of time any kernel ran on a whole GPU, 0-100 (none for MIG instances)."""
GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""Ratio of time the graphics engine was active, 0-1: of the GPU, or of the MIG instance on an instance's series."""
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
"""Framebuffer used, MiB (per instance on a MIG instance's series)."""
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
"""Framebuffer free, MiB."""
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
"""The last XID error code of the GPU (0: none)."""
SIGNALS: Final = (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE)
"""The signals the extender and the report read."""

GPU: Final = "gpu"
"""The GPU's index on its node."""
UUID: Final = "UUID"
MODEL: Final = "modelName"
"""The GPU's model, `NVIDIA A100-SXM4-40GB`, `NVIDIA A30` (`gpupack.core.gpus.catalog.mig_model_of` reads it)."""
INSTANCE: Final = "GPU_I_ID"
"""The MIG instance's id; absent or empty on a whole GPU's series."""
PROFILE: Final = "GPU_I_PROFILE"
"""The MIG instance's profile, `3g.40gb`."""
HOST_LABELS: Final = ("Hostname", "hostname")
"""The exporter's host label, before and after dcgm-exporter #655: the node's name when NODE_NAME is set."""
POD: Final = "pod"
NAMESPACE: Final = "namespace"
CONTAINER: Final = "container"
EXPORTED_POD: Final = "exported_pod"
"""The workload's pod through a ServiceMonitor (Prometheus renames the exporter's `pod` that collides with the
scrape target's `pod`)."""
EXPORTED_NAMESPACE: Final = "exported_namespace"
POD_LABELS: Final = (POD, NAMESPACE, EXPORTED_POD, EXPORTED_NAMESPACE)
"""Every label that may name the workload of a series."""


def node_of(labels: Mapping[str, str], node_label: str | None, by_uuid: Mapping[str, str] | None = None) -> str | None:
    """The node a series belongs to: the node whose DRA driver publishes the series' GPU (`by_uuid`, GPU UUID to
    node, from `gpupack.core.dra.nodes_by_uuid`), else the label the admin names, else the host label in either
    spelling."""
    if by_uuid:
        found = by_uuid.get(labels.get(UUID, ""))
        if found:
            return found
    for key in (node_label,) if node_label else HOST_LABELS:
        value = labels.get(key)
        if value:
            return value
    return None


def exporter_pods(labels: Iterable[Mapping[str, str]]) -> set[str]:
    """The exporter's own pods among these series: a `pod` seen beside an `exported_pod` is a ServiceMonitor
    target's (the exporter DaemonSet pod), never a workload, on that series and on every other one."""
    return {each[POD] for each in labels if each.get(EXPORTED_POD) and POD in each}


def workload(labels: Mapping[str, str], exporters: Set[str]) -> tuple[str, str] | None:
    """`(namespace, pod)` of the workload a series maps its GPU to: `exported_pod` (through a ServiceMonitor)
    else `pod`, with the namespace beside it; None without a pod or when the pod is one of `exporters`."""
    if labels.get(EXPORTED_POD):
        pod, namespace = labels[EXPORTED_POD], labels.get(EXPORTED_NAMESPACE, "")
    else:
        pod, namespace = labels.get(POD, ""), labels.get(NAMESPACE, "")
    if not pod or pod in exporters:
        return None
    return namespace, pod


def busy_fraction(instances: Iterable[tuple[float, str]], model: str | None = None) -> float:
    """A MIG GPU's busy fraction, 0-1, from its instances' `(engine activity 0-1, profile)`: the activities
    weighted by the instances' compute slices, over the GPU's (`catalog.instance_slices`; `model`, a catalog key,
    decides when known). Idle slices and slices without an instance count as idle."""
    weighted: dict[int, float] = {}
    for activity, profile in instances:
        slices, total = instance_slices(profile, model)
        weighted[total] = weighted.get(total, 0.0) + activity * slices
    return min(sum(value / total for total, value in weighted.items()), 1.0)


def fold_promql(
    instances: Callable[[str], str], by: str, profiles: Iterable[str] | None = None, scale: str = ""
) -> str:
    """PromQL for a MIG GPU's busy fraction per `by` (times `scale`, e.g. ` * 100`): `busy_fraction` over instance
    series, from the same table (`catalog.slice_table`).

    `instances(matchers)` is the vector of instance activities (0-1) for `GPU_I_PROFILE` matchers, with the
    instance's labels kept (`GPU_I_ID` at least), so two instances of one profile stay two series. Per GPU size
    (7 compute slices, the A30's 4), the activities times their instances' compute slices are summed per `by` and
    divided by the size; a GPU's instances are all of one size, so `or` joins the sizes.

    With `profiles` None every profile is folded: the sizes other than 7 by the catalog's names, and of 7 every
    other name by its leading `<n>g.`, which is NVIDIA's name for n compute slices (a test checks the catalog's
    names keep to it), so names the catalog does not know count as `instance_slices` counts them. With `profiles`
    given, only those names are folded (the ones a window has: a shorter query). "" when there is nothing to fold.
    """
    named = slice_table() if profiles is None else {name: instance_slices(name) for name in set(profiles)}
    sizes: dict[int, dict[int, list[str]]] = {}
    for name, (slices, total) in named.items():
        sizes.setdefault(total, {}).setdefault(slices, []).append(name)
    parts = []
    if profiles is None:
        other_sizes = [name for name, (_, total) in named.items() if total != SEVEN_SLICES]
        exclude = f"{PROFILE}!~{_string(_alternatives(other_sizes))}"
        terms = []
        for n in sorted({slices for slices, total in named.values() if total == SEVEN_SLICES}):
            leading = _string(rf"{n}g\..+")
            terms.append(f"{instances(f'{PROFILE}=~{leading}, {exclude}')} * {n}")
        parts.append(f"sum by ({by}) ({' or '.join(terms)}){scale} / {SEVEN_SLICES}")
        sizes.pop(SEVEN_SLICES, None)
    for total, by_slices in sorted(sizes.items(), reverse=True):
        terms = [
            f"{instances(f'{PROFILE}=~{_string(_alternatives(names))}')} * {slices}"
            for slices, names in sorted(by_slices.items())
        ]
        parts.append(f"sum by ({by}) ({' or '.join(terms)}){scale} / {total}")
    return " or ".join(parts)


def _alternatives(names: Iterable[str]) -> str:
    """A regular expression matching these profile names, with or without a suffix (`1g.6gb+me` is a `1g.6gb`
    with the media engines, as `catalog.instance_slices` reads it); PromQL anchors it at both ends."""
    return "(?:" + "|".join(re.escape(name) for name in sorted(names)) + r")(?:\+.*)?"


def _string(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
