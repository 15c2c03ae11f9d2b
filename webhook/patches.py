"""RFC 6902 JSON Patch built from intents, against the raw object the API server sent.

Planners say what must hold ("this map has this entry", "this list holds this item", "this key is gone");
`PatchBuilder.ops()` turns that into the fewest `add` / `replace` / `remove` operations, creating a missing
parent once with all its entries. Nothing is ever re-serialised, so fields gpupack does not model pass through
untouched, and an object that already satisfies every intent yields an empty patch (idempotence).
"""

from __future__ import annotations

import base64
import copy
from typing import Any, Literal, NotRequired, TypedDict

import orjson

Path = tuple[str | int, ...]


class PatchOp(TypedDict):
    """One JSON Patch operation."""

    op: Literal["add", "replace", "remove"]
    path: str
    value: NotRequired[Any]


def escape(token: str | int) -> str:
    """Escape one JSON Pointer reference token (RFC 6901): `~` becomes `~0`, then `/` becomes `~1`."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    """The JSON Pointer of a path: `('metadata', 'annotations', 'a.io/x')` is `/metadata/annotations/a.io~1x`."""
    return "".join("/" + escape(token) for token in path)


def encode_patch(ops: list[PatchOp]) -> str:
    """The base64 form an AdmissionResponse carries."""
    return base64.b64encode(orjson.dumps(ops)).decode()


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(doc))
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits: rare, slower path
        copied = copy.deepcopy(doc)
    return copied


def _nest(tokens: Path, leaf: Any) -> Any:
    for token in reversed(tokens):
        leaf = {str(token): leaf}
    return leaf


class PatchBuilder:
    """Turns intents into operations, applying each to a private copy so later intents see earlier ones.

    Two intents that both need a missing parent (say a required and a preferred node affinity on a pod without
    `spec.affinity`) therefore create it once and then add to it, instead of overwriting each other.
    """

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = _copy(doc)
        self._ops: list[PatchOp] = []

    def ops(self) -> list[PatchOp]:
        """The operations so far, in order."""
        return list(self._ops)

    def current(self, path: Path) -> Any:
        """The value at `path` with the intents so far applied, or None when absent."""
        node: Any = self._doc
        for token in path:
            if isinstance(token, int):
                if not isinstance(node, list) or not 0 <= token < len(node):
                    return None
                node = node[token]
            else:
                if not isinstance(node, dict) or node.get(token) is None:
                    return None
                node = node[token]
        return node

    def _deepest(self, path: Path) -> tuple[Any, int]:
        """The deepest existing node along `path` and the number of tokens that exist."""
        node: Any = self._doc
        for depth in range(len(path)):
            nxt = self.current(path[: depth + 1])
            if nxt is None:
                return node, depth
            node = nxt
        return node, len(path)

    def _add_missing(self, path: Path, leaf: Any) -> bool:
        """Create the first missing parent of `path` holding `leaf`; False when `path` already exists."""
        parent, depth = self._deepest(path)
        if depth == len(path):
            return False
        token = path[depth]
        if not isinstance(token, str) or not isinstance(parent, dict):
            raise TypeError(f"cannot create {pointer(path[: depth + 1])}")
        value = _nest(path[depth + 1 :], leaf)
        parent[token] = value
        self._ops.append({"op": "add", "path": pointer(path[: depth + 1]), "value": _copy_value(value)})
        return True

    def set(self, path: Path, key: str, value: Any) -> None:
        """The mapping at `path` must map `key` to `value`."""
        self.set_many(path, {key: value})

    def set_many(self, path: Path, entries: dict[str, Any]) -> None:
        """The mapping at `path` must hold `entries`; a missing mapping is created once with all of them."""
        if not entries or self._add_missing(path, dict(entries)):
            return
        node = self.current(path)
        if not isinstance(node, dict):
            raise TypeError(f"{pointer(path)} is not an object")
        for key, value in entries.items():
            if node.get(key) is None:
                self._ops.append({"op": "add", "path": pointer((*path, key)), "value": _copy_value(value)})
            elif node[key] != value:
                self._ops.append({"op": "replace", "path": pointer((*path, key)), "value": _copy_value(value)})
            else:
                continue
            node[key] = _copy_value(value)

    def remove(self, path: Path, key: str) -> None:
        """The mapping at `path` must not contain `key`."""
        node = self.current(path)
        if isinstance(node, dict) and key in node:
            del node[key]
            self._ops.append({"op": "remove", "path": pointer((*path, key))})

    def append(self, path: Path, item: Any) -> None:
        """The list at `path` must contain `item`: appended when no equal item is there, created when missing."""
        if self._add_missing(path, [item]):
            return
        node = self.current(path)
        if not isinstance(node, list):
            raise TypeError(f"{pointer(path)} is not a list")
        if item not in node:
            node.append(_copy_value(item))
            self._ops.append({"op": "add", "path": pointer((*path, "-")), "value": _copy_value(item)})


def _copy_value(value: Any) -> Any:
    """Values in ops and in the working copy must not share mutable parts."""
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def apply_patch(doc: dict[str, Any], ops: list[PatchOp]) -> dict[str, Any]:
    """Apply operations made by PatchBuilder (`add`, `replace`, `remove`) to a copy of `doc`.

    Used by `gpupack mutate` to show the resulting pod; tests check it against a full RFC 6902 library.
    """
    result = _copy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent, last = _parent(result, tokens[:-1]), tokens[-1]
        if op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif isinstance(parent, list):
            value = _copy_value(op["value"])
            if last == "-":
                parent.append(value)
            elif op["op"] == "add":
                parent.insert(int(last), value)
            else:
                parent[int(last)] = value
        else:
            parent[last] = _copy_value(op["value"])
    return result
