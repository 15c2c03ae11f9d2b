"""kube-scheduler's extender wire format (`k8s.io/kube-scheduler/extender/v1`), read and written.

The Go structs have no json tags, so keys are Go field names (`Pod`, `Nodes`, `NodeNames`, `FailedNodes`,
`FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`); Go's decoder matches keys case-insensitively, and so
does `parse_args`. Both forms carry both keys, one of them null: `NodeNames` when the extender is
`nodeCacheCapable`, a full `Nodes` list otherwise (and in Cluster Autoscaler's simulation). Replies use
the form received.

Failures: `ArgsError` (not an ExtenderArgs, or more than the extender accepts: see `MAX_CANDIDATES` and
`MAX_DECODED_BYTES`) is answered in band, HTTP 200 with `Error` set for filter and an empty list for prioritize,
because any other status fails the scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gpupack.core.jsonbound import json_values_bound

MAX_CANDIDATES = 15_000
"""Candidate nodes (NodeNames, or Nodes items) one request may carry; more is refused before any is decided.

kube-scheduler sends only the nodes that passed its own filters, at most `percentageOfNodesToScore` of the
cluster (about 800 at most with the default; all of them at 100 %), and Kubernetes is tested up to 5,000
nodes, with some clusters run up to 15,000. A request naming more is not from a scheduler: 5 million names
took 4.1 s and 1.66 GB. Copies of one name count like distinct names, so the cap bounds duplicates too.
"""

MAX_DECODED_BYTES = 384 * 2**20
"""Memory the decoded objects of one body may take, estimated before decoding (`decoded_bytes_bound`); a body
estimated above it is refused undecoded.

Decoding makes objects many times the body's size. Measured (`python -m bench.extender.request_memory`, a
small extender's peak RSS over its RSS before the request), 64 MiB bodies of one-character node names, of
minimal Node objects and of empty objects in a Pod field cost 1.5, 2.5 and 2.0 GB before this limit; now
each is refused for 128 MB (aiohttp's two copies of the body). The worst bodies that pass (nested one-key
objects up to the estimate, alone or beside an emoji string filling 64 MiB) cost 456 and 498 MB, everything
included. The extender holds 330-350 MB with 150,000 pods (`make bench-extender`), so its worst request peaks
near 850 MB, under the Deployment's 1 Gi limit. A scheduler's requests are far below: 500 node names are
0.1 MiB by the estimate, and a NodeList of 5,000 realistic nodes (5 KB each with managedFields, conditions
and 20 images: 25 MB, 166 MB measured) 205 MiB; about 9,000 such nodes fit.
"""

BYTES_PER_VALUE = 192
"""The most one JSON value costs decoded, beside its characters: a one-key object (184 bytes, the worst measured
per value; `{}` is 72, a one-character string 58, a number 32-36) and the pointer to it (8)."""


class ArgsError(ValueError):
    """A request body that is not an ExtenderArgs, or more of one than the extender accepts; the message names
    what is wrong."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """The pod and the candidate nodes: `node_names` in the cache-capable form, `nodes` in the full form."""

    pod: Mapping[str, Any]
    node_names: list[str] | None
    nodes: list[Mapping[str, Any]] | None

    @property
    def names(self) -> list[str]:
        """Candidate node names in the order received, whichever form was sent."""
        if self.node_names is not None:
            return self.node_names
        return [str((n.get("metadata") or {}).get("name", "")) for n in self.nodes or []]


def _field(body: Mapping[str, Any], name: str) -> Any:
    lowered = name.lower()
    for key, value in body.items():
        if key.lower() == lowered:
            return value
    return None


def _all_strings(items: list[Any]) -> bool:
    """Whether every item is a string. `str.join` checks that in C, four times faster than any per-item test
    written in Python for the 500 names of a typical request."""
    try:
        "".join(items)
    except TypeError:
        return False
    return True


def decoded_bytes_bound(raw: bytes) -> int:
    """An upper bound on the memory the objects `orjson.loads(raw)` returns take, from passes over the bytes in C
    (the decoder's own document, about 16 bytes a value, is freed as it returns).

    Each value but the first of an array or object follows a comma, so commas plus opening brackets bound the
    values (commas and brackets inside strings only make the bound safer), each costing at most
    `BYTES_PER_VALUE`. Characters cost one byte each in an ASCII body; any other byte, or a `\\u` escape, may
    widen a whole string to four bytes per character (one emoji does), so such a body counts four per byte.
    """
    values = json_values_bound(raw)
    per_char = 1 if raw.isascii() and b"\\u" not in raw else 4
    return values * BYTES_PER_VALUE + len(raw) * per_char


def _decodable(raw: bytes, budget: int) -> None:
    """Refuse a body whose decoded objects could exceed `budget` bytes, before decoding it.

    A value takes at least two bytes of JSON (`0,`), so a body of n bytes cannot cost more than
    (BYTES_PER_VALUE / 2 + 4) * n: a body for which that is within the budget (up to 4 MiB) is not counted, and
    the scheduler's requests (tens of KB; counting 13 KB took 13 µs, 64 MiB 90 ms) pay nothing.
    """
    if len(raw) * (BYTES_PER_VALUE // 2 + 4) <= budget:
        return
    bound = decoded_bytes_bound(raw)
    if bound > budget:
        raise ArgsError(
            f"the {len(raw)}-byte body could decode to {bound} bytes of objects, more than the {budget} the "
            "extender allows one request (a scheduler's ExtenderArgs needs far less)"
        )


def _candidates(count: int, field: str, cap: int) -> None:
    if count > cap:
        raise ArgsError(f"ExtenderArgs.{field} has {count} nodes, more than the {cap} the extender accepts")


def parse_args(raw: bytes, max_candidates: int = MAX_CANDIDATES, max_decoded: int = MAX_DECODED_BYTES) -> ExtenderArgs:
    """Decode an ExtenderArgs body. Raises ArgsError naming the field, or the count and the limit when the body
    could decode to more than `max_decoded` bytes (checked before decoding) or names more than `max_candidates`
    nodes."""
    _decodable(raw, max_decoded)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArgsError(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ArgsError(f"ExtenderArgs must be a JSON object, got {type(body).__name__}")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict):
        raise ArgsError("ExtenderArgs.Pod must be a Pod object")
    names = _field(body, "NodeNames")
    node_list = _field(body, "Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise ArgsError("ExtenderArgs.NodeNames must be a list of node names")
        _candidates(len(names), "NodeNames", max_candidates)
        if not _all_strings(names):
            raise ArgsError("ExtenderArgs.NodeNames must be a list of node names")
        return ExtenderArgs(pod, names, None)
    if node_list is None:
        raise ArgsError("ExtenderArgs has neither NodeNames nor Nodes")
    items = node_list.get("items") if isinstance(node_list, dict) else None
    if isinstance(items, list):
        _candidates(len(items), "Nodes.items", max_candidates)
    if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
        raise ArgsError("ExtenderArgs.Nodes must be a NodeList with an items list of Node objects")
    for i, node in enumerate(items):
        name = (node.get("metadata") or {}).get("name") if isinstance(node.get("metadata"), dict) else None
        if not isinstance(name, str) or not name:
            raise ArgsError(f"ExtenderArgs.Nodes.items[{i}].metadata.name is missing")
    return ExtenderArgs(pod, None, items)


def filter_result(
    args: ExtenderArgs | None,
    passed: list[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> bytes:
    """ExtenderFilterResult in the form of the request (NodeNames, or Nodes with the original objects)."""
    nodes: dict[str, Any] | None = None
    names: list[str] | None = None
    if args is not None and args.nodes is not None:
        keep = set(passed)
        nodes = {"metadata": {}, "items": [n for n in args.nodes if n["metadata"]["name"] in keep]}
    elif args is not None:
        names = passed
    body = {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    return orjson.dumps(body)


def priority_list(names: list[str], scores: list[int]) -> bytes:
    """HostPriorityList: `{"Host": name, "Score": score}` for each node, in order."""
    return orjson.dumps([{"Host": host, "Score": score} for host, score in zip(names, scores, strict=True)])


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """ExtenderPreemptionArgs: the preemptor and, per candidate node, the victims kube-scheduler chose (by uid) and
    the PodDisruptionBudgets their eviction would violate."""

    pod: Mapping[str, Any]
    victims: dict[str, tuple[tuple[str, ...], int]]


def _victims(value: Any, field: str, meta: bool, max_candidates: int) -> dict[str, tuple[tuple[str, ...], int]]:
    if not isinstance(value, dict):
        raise ArgsError(f"ExtenderPreemptionArgs.{field} must be an object of node names")
    _candidates(len(value), field, max_candidates)
    out: dict[str, tuple[tuple[str, ...], int]] = {}
    for node, victims in value.items():
        if not isinstance(victims, dict):
            raise ArgsError(f"ExtenderPreemptionArgs.{field}[{node!r}] must be an object with Pods")
        pods = _field(victims, "Pods") or []
        violations = _field(victims, "NumPDBViolations") or 0
        if not isinstance(pods, list) or not isinstance(violations, int) or isinstance(violations, bool):
            raise ArgsError(f"ExtenderPreemptionArgs.{field}[{node!r}] must have a Pods list and NumPDBViolations")
        uids = []
        for pod in pods:
            uid = _field(pod, "UID") if meta and isinstance(pod, dict) else None
            if not meta and isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
                uid = pod["metadata"].get("uid")
            if not isinstance(uid, str) or not uid:
                raise ArgsError(f"ExtenderPreemptionArgs.{field}[{node!r}]: a victim without a uid")
            uids.append(uid)
        out[node] = (tuple(uids), violations)
    return out


def parse_preemption_args(
    raw: bytes, max_candidates: int = MAX_CANDIDATES, max_decoded: int = MAX_DECODED_BYTES
) -> PreemptionArgs:
    """Decode an ExtenderPreemptionArgs body: `NodeNameToMetaVictims` (victims by uid: `nodeCacheCapable`) or
    `NodeNameToVictims` (full pods). Raises ArgsError naming the field, as `parse_args` does."""
    _decodable(raw, max_decoded)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArgsError(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ArgsError(f"ExtenderPreemptionArgs must be a JSON object, got {type(body).__name__}")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict):
        raise ArgsError("ExtenderPreemptionArgs.Pod must be a Pod object")
    meta = _field(body, "NodeNameToMetaVictims")
    if meta is not None:
        return PreemptionArgs(pod, _victims(meta, "NodeNameToMetaVictims", True, max_candidates))
    full = _field(body, "NodeNameToVictims")
    if full is None:
        raise ArgsError("ExtenderPreemptionArgs has neither NodeNameToMetaVictims nor NodeNameToVictims")
    return PreemptionArgs(pod, _victims(full, "NodeNameToVictims", False, max_candidates))


def preemption_result(kept: Mapping[str, tuple[Sequence[str], int]]) -> bytes:
    """ExtenderPreemptionResult: `NodeNameToMetaVictims` of the nodes kept, their victims by uid. The extender
    answers in this form whichever it received (kube-scheduler maps the uids back to the pods on each node)."""
    body = {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
            for node, (uids, violations) in kept.items()
        }
    }
    return orjson.dumps(body)
