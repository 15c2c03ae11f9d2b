"""docs/reference/labels.md and the developers' labels table: the labels and annotations of the contract
(`gpupack.core.contract.KEYS`), with the extended resources the webhook writes."""

from __future__ import annotations

from gpupack.core import contract
from gpupack.reference.markdown import GENERATED, code, table


def developer_table() -> str:
    """The pod labels a developer sets: the table the README and the developers' page show."""
    rows = [(code(k.name), k.values, k.meaning) for k in contract.KEYS if k.on == "pod label"]
    return table(("label", "values", "effect"), rows)


def page() -> str:
    """Every label and annotation, by what carries it, and the resources pods are given."""
    out = [
        GENERATED.format(source="gpupack/core/contract.py"),
        "# Labels and annotations\n",
        "Every label and annotation gpupack reads or writes. Developers set the pod labels; the webhook writes the "
        "annotations marked so and the pod's resources, scheduler, placement and priority "
        "([what a pod gets](../developers/labels.md)).\n",
    ]
    for on in dict.fromkeys(k.on for k in contract.KEYS):
        out.append(f"## {on[0].upper()}{on[1:]}s\n")
        keys = [k for k in contract.KEYS if k.on == on]
        out.append(
            table(
                ("name", "set by", "values", "meaning"), ((code(k.name), k.set_by, k.values, k.meaning) for k in keys)
            )
        )
    out.append("## Extended resources\n")
    out.append(
        table(
            ("resource", "what it is"),
            [
                (code(contract.RESOURCE_GPU), "a whole GPU, as the NVIDIA device plugin advertises it"),
                (
                    code(contract.RESOURCE_GPU_SHARED),
                    "one time-sliced replica of a GPU (the device plugin's `renameByDefault: true`; the policy's "
                    "`timeSlicing.resourceName`)",
                ),
                (
                    code(f"{contract.RESOURCE_MIG_PREFIX}<profile>"),
                    "one MIG instance, e.g. `nvidia.com/mig-1g.10gb` (the device plugin's `mixed` strategy)",
                ),
            ],
        )
    )
    return "\n".join(out)
