"""Reading the YAML documents people write (the policy ConfigMap, simulator scenarios): safely, fast, and with
a key given twice refused instead of silently keeping the last one.

`mode: audit` followed further down by `mode: enforce` is a mistake the admin should hear about, not a policy
that quietly enforces. libyaml's parser (PyYAML's `CSafeLoader`, in its wheels) is used when present: it reads a
1 MiB policy about ten times faster than the pure-Python one.
"""

from __future__ import annotations

from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_Base):  # type: ignore[valid-type,misc]
    """A safe loader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:  # `<<: *anchor`: merged keys may be overridden, as YAML says
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base constructor names the problem
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def load(text: str | bytes) -> Any:
    """One YAML document as Python data. Raises yaml.YAMLError (a key given twice among them) and
    RecursionError for nesting deeper than the interpreter's stack."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a safe loader: no arbitrary objects
