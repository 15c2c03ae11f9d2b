"""RFC 6902 JSON Patch built from intents, against the raw object the API server sent.

Planners say what must hold ("this map has this entry", "this list holds this item", "this key is gone");
`PatchBuilder.ops()` turns that into the fewest `add` / `replace` / `remove` operations, creating a missing
parent once with all its entries. Nothing is ever re-serialised, so fields gpupack does not model pass through
untouched, and an object that already satisfies every intent yields an empty patch (idempotence).
"""

from __future__ import annotations

import binascii
import copy
from functools import lru_cache
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
    text = str(token)
    if "~" in text or "/" in text:
        return text.replace("~", "~0").replace("/", "~1")
    return text


@lru_cache(maxsize=4096)
def pointer(path: Path) -> str:
    """The JSON Pointer of a path: `('metadata', 'annotations', 'a.io/x')` is `/metadata/annotations/a.io~1x`."""
    return "".join("/" + escape(token) for token in path)


def encode_patch(ops: list[PatchOp]) -> str:
    """The base64 form an AdmissionResponse carries (what `base64.b64encode` does, without its Python wrapper)."""
    return binascii.b2a_base64(orjson.dumps(ops), newline=False).decode("ascii")


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
    """Turns intents into operations, applying each to a working view so later intents see earlier ones.

    Two intents that both need a missing parent (say a required and a preferred node affinity on a pod without
    `spec.affinity`) therefore create it once and then add to it, instead of overwriting each other. The view
    shares the original document and copies only the objects along a path it changes (path copying), so the
    caller's document is never modified and an admission does not pay for copying the whole pod. Values put
    in the view are shared with the operations but never owned: a later change below them copies them first.
    """

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc: dict[str, Any] = dict(doc)
        self._owned: set[int] = {id(self._doc)}
        self._ops: list[PatchOp] = []

    def _writable(self, path: Path) -> Any:
        """The node at `path` (which must exist), copied along the way so it may be changed in place."""
        node: Any = self._doc
        owned = self._owned
        for token in path:
            child = node[token]
            if id(child) not in owned:
                kind = type(child)
                if kind is dict or kind is list:
                    child = kind(child)
                    node[token] = child
                    owned.add(id(child))
            node = child
        return node

    def ops(self) -> list[PatchOp]:
        """The operations so far, in order."""
        return list(self._ops)

    def _locate(self, path: Path) -> tuple[Any, int]:
        """The deepest existing node along `path` and how many tokens of it exist (one walk)."""
        node: Any = self._doc
        for depth, token in enumerate(path):
            if isinstance(token, int):
                if not isinstance(node, list) or not 0 <= token < len(node):
                    return node, depth
                child = node[token]
            else:
                child = node.get(token) if isinstance(node, dict) else None
                if child is None:
                    return node, depth
            node = child
        return node, len(path)

    def current(self, path: Path) -> Any:
        """The value at `path` with the intents so far applied, or None when absent."""
        node, depth = self._locate(path)
        return node if depth == len(path) else None

    def _create(self, path: Path, depth: int, node: Any, leaf: Any) -> None:
        """Create the first missing parent of `path` (at `depth`, below the existing `node`) with `leaf` at the
        end, in one `add`."""
        token = path[depth]
        if not isinstance(token, str) or not isinstance(node, dict):
            raise TypeError(f"cannot create {pointer(path[: depth + 1])}")
        value = _nest(path[depth + 1 :], leaf)
        self._writable(path[:depth])[token] = value
        self._ops.append({"op": "add", "path": pointer(path[: depth + 1]), "value": value})

    def _ensure(self, path: Path, leaf: Any) -> Any:
        """The node at `path`, or None after creating its first missing parent with `leaf` at the end."""
        node, depth = self._locate(path)
        if depth == len(path):
            return node
        self._create(path, depth, node, leaf)
        return None

    def set(self, path: Path, key: str, value: Any) -> None:
        """The mapping at `path` must map `key` to `value` (`set_many` of one entry, without the mapping)."""
        node, depth = self._locate(path)
        if depth < len(path):
            self._create(path, depth, node, {key: value})
            return
        if not isinstance(node, dict):
            raise TypeError(f"{pointer(path)} is not an object")
        current = node.get(key)
        if current is None:
            op: Literal["add", "replace"] = "add"
        elif current != value:
            op = "replace"
        else:
            return
        self._writable(path)[key] = value
        self._ops.append({"op": op, "path": pointer(path) + "/" + escape(key), "value": value})

    def set_many(self, path: Path, entries: dict[str, Any]) -> None:
        """The mapping at `path` must hold `entries`; a missing mapping is created once with all of them."""
        if not entries:
            return
        node, depth = self._locate(path)
        if depth < len(path):
            self._create(path, depth, node, dict(entries))
            return
        if not isinstance(node, dict):
            raise TypeError(f"{pointer(path)} is not an object")
        writable: dict[str, Any] | None = None
        prefix = ""
        for key, value in entries.items():
            current = node.get(key)
            if current is None:
                op: Literal["add", "replace"] = "add"
            elif current != value:
                op = "replace"
            else:
                continue
            if writable is None:
                writable = self._writable(path)
                prefix = pointer(path) + "/"  # once per mapping, not once per key: this runs on every admission
            self._ops.append({"op": op, "path": prefix + escape(key), "value": value})
            writable[key] = value

    def remove(self, path: Path, key: str) -> None:
        """The mapping at `path` must not contain `key` (which may be the pod's own: a GPU resource name the policy
        replaces, so it is escaped here and never joins the cached pointers)."""
        node = self.current(path)
        if isinstance(node, dict) and key in node:
            del self._writable(path)[key]
            self._ops.append({"op": "remove", "path": pointer(path) + "/" + escape(key)})

    def append(self, path: Path, item: Any) -> None:
        """The list at `path` must contain `item`: appended when no equal item is there, created when missing."""
        node = self._ensure(path, [item])
        if node is None:
            return
        if not isinstance(node, list):
            raise TypeError(f"{pointer(path)} is not a list")
        if item not in node:
            self._writable(path).append(item)
            self._ops.append({"op": "add", "path": pointer((*path, "-")), "value": item})


def _copy_value(value: Any) -> Any:
    """Values in ops and in the working copy must not share mutable parts."""
    if isinstance(value, dict):
        return _copy(value)
    if isinstance(value, list):
        return _copy({"v": value})["v"]
    return value


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
