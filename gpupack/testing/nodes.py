"""Node objects as kube-scheduler's informer holds them, for the extender's size bounds (tests and benchmarks)."""

from __future__ import annotations

from typing import Any

CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def realistic_node(i: int) -> dict[str, Any]:
    """A Node as kube-scheduler's informer holds it (about 6 KB of JSON): managedFields, conditions, images."""
    name = f"ip-10-{i // 250}-{i % 250}-1.ec2.internal"
    labels = {f"label-{k}.example.com/key": f"value-{k}" for k in range(12)} | {"kubernetes.io/hostname": name}
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {".": {}} | {f"f:{k}": {} for k in labels}}}
    resources: dict[str, Any] = {".": {}, "f:cpu": {}, "f:memory": {}}
    status_fields = {"f:status": {f"f:{k}": resources for k in ("allocatable", "capacity")}}
    condition = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T20:40:14Z"}
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "csi.volume.kubernetes.io/nodeid": '{"ebs":"i-0"}'},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields},
                {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": status_fields},
            ],
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}", "podCIDR": "10.0.0.0/24"},
        "status": {
            "capacity": {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{**condition, "type": t} for t in CONDITIONS],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i % 250}.1"},
                {"type": "Hostname", "address": name},
            ],
            "images": [
                {"names": [f"registry.example.com/team/image-{k}@sha256:{'0' * 64}"], "sizeBytes": 123456789}
                for k in range(20)
            ],
        },
    }
