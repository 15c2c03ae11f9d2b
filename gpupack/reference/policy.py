"""docs/reference/policy.md: every field of the policy document, from the model (`gpupack.core.policy.Policy`).

A field's meaning is its attribute docstring, its type and bounds are its annotation, its default is what an empty
document validates to. An object field is its own section, described by its model's docstring; a leaf without a
docstring is an error, so a new field cannot reach the page undocumented.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from gpupack.core.policy import Policy
from gpupack.reference import docstrings
from gpupack.reference.markdown import GENERATED, code, paragraph, table

LONG = 90
"""A default longer than this many characters is listed under its section, not in the table."""


@dataclass(frozen=True, slots=True)
class Row:
    """One field of the document."""

    path: str
    kind: str
    default: str
    meaning: str


@dataclass(frozen=True, slots=True)
class Section:
    """The fields of one object of the document."""

    path: str
    """The object's dotted path, `""` for the document itself."""
    about: str
    rows: tuple[Row, ...]
    long_defaults: tuple[tuple[str, Any], ...]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (itself, or inside `X | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (types.UnionType, typing.Union):
        models = [m for a in get_args(annotation) if (m := _model_of(a)) is not None]
        return models[0] if len(models) == 1 else None
    return None


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (types.UnionType, typing.Union) and type(None) in get_args(annotation)


def _bounds(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for cls, sign in (
            (annotated_types.Ge, ">="),
            (annotated_types.Gt, ">"),
            (annotated_types.Le, "<="),
            (annotated_types.Lt, "<"),
        ):
            if isinstance(item, cls):
                parts.append(f"{sign} {_number(getattr(item, cls.__name__.lower()))}")
        if isinstance(item, annotated_types.MinLen):
            parts.append(f"at least {item.min_length}")
        if isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length:,}")
    return ", ".join(parts)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}" if abs(value) >= 10_000 else str(value)


VALIDATED = {"_positive_quantity": "quantity", "_dns_subdomain": "object name"}
"""What a string checked by these validators is called (`gpupack.core.policy`'s `Quantity` and `ObjectName`)."""


def kind(annotation: Any, metadata: list[Any] | None = None) -> str:
    """A field's type for people: `integer (>= 1, <= 100)`, `` `a` or `b` ``, `quantity or null`..."""
    named = [
        VALIDATED[n] for m in metadata or [] if (n := getattr(getattr(m, "func", None), "__name__", "")) in VALIDATED
    ]
    text = named[0] if named and annotation is str else _kind(annotation)
    bounds = _bounds(list(metadata or []))
    return f"{text} ({bounds})" if bounds else text


def _kind(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = get_args(annotation)
        names = {getattr(getattr(e, "func", None), "__name__", "") for e in extra}
        for name in names:
            if name in VALIDATED:
                return VALIDATED[name]
        return _kind(base)
    if origin is Literal:
        return " or ".join(code(str(a)) for a in get_args(annotation))
    if origin in (types.UnionType, typing.Union):
        parts = [_kind(a) for a in get_args(annotation) if a is not type(None)]
        return " or ".join(parts) + (" or null" if _nullable(annotation) else "")
    if origin is list:
        return f"list of {_kind(get_args(annotation)[0])}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"map of {_kind(key)} to {_kind(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    plain: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in plain:
        return plain[annotation]
    raise TypeError(f"no reference name for the type {annotation!r}")


def flow(value: Any) -> str:
    """A default as YAML flow style: `{key: node-type, value: spot}`, `[]`, `null`, `30`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return str(value) if value != "" else '""'


def _meaning(model: type[BaseModel], name: str) -> str | None:
    for cls in model.__mro__:
        if issubclass(cls, BaseModel) and cls is not BaseModel:
            found = docstrings.of_class(cls).get(name)
            if found is not None:
                return found
    return None


def _about(model: type[BaseModel]) -> str:
    return paragraph(model.__doc__ or "")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def sections(model: type[BaseModel] = Policy, defaults: Any = None, path: str = "") -> Iterator[Section]:
    """The document's sections, depth first: the object at `path` (a `model`, whose defaults are `defaults`),
    then each object field in it."""
    if defaults is None:
        defaults = model().model_dump(mode="json", by_alias=True)
    rows: list[Row] = []
    long_defaults: list[tuple[str, Any]] = []
    nested: list[Iterator[Section]] = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        here = _join(path, alias)
        value = defaults.get(alias) if isinstance(defaults, dict) else None
        if value is None and not info.is_required():  # an entry of a list or map: the field's own default
            value = to_jsonable_python(info.get_default(call_default_factory=True), by_alias=True)
        sub = _model_of(info.annotation)
        meaning = _meaning(model, name)
        if sub is not None and not _nullable(info.annotation) and meaning is None:
            nested.append(_object_sections(sub, value, here))
            continue
        if meaning is None:
            raise ValueError(f"policy field {here} ({model.__name__}.{name}) has no docstring")
        rows.append(_row(here, info, value, meaning, long_defaults))
        if sub is not None:
            nested.append(_object_sections(sub, value, here))
        for element, template in _elements(info.annotation, here):
            nested.append(sections(element, {}, template))  # an entry's fields take their own defaults
    yield Section(path, _about(model), tuple(rows), tuple(long_defaults))
    for more in nested:
        yield from more


def _object_sections(model: type[BaseModel], value: Any, path: str) -> Iterator[Section]:
    if path == "classes":  # one section for the three classes: the same fields, defaults per class
        yield from _classes(model, value)
        return
    yield from sections(model, value if isinstance(value, dict) else None, path)


def _elements(annotation: Any, path: str) -> list[tuple[type[BaseModel], str]]:
    """The model of a list's or a map's entries, and the path its fields are written under."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and (m := _model_of(args[0])) is not None:
        return [(m, f"{path}[]")]
    if origin is dict and (m := _model_of(args[1])) is not None:
        return [(m, f"{path}.<name>")]
    return []


def _row(path: str, info: FieldInfo, value: Any, meaning: str, long_defaults: list[tuple[str, Any]]) -> Row:
    rendered = flow(value)
    if info.is_required():
        default = "required"
    elif len(rendered) > LONG:
        long_defaults.append((path, value))
        default = "see below"
    else:
        default = code(rendered)
    return Row(path, kind(info.annotation, info.metadata), default, meaning)


def _classes(model: type[BaseModel], value: Any) -> Iterator[Section]:
    class_policy = _model_of(next(iter(model.model_fields.values())).annotation)  # the model all three share
    assert class_policy is not None
    defaults = value if isinstance(value, dict) else {}
    rows = []
    for name, info in class_policy.model_fields.items():
        alias = info.alias or name
        meaning = _meaning(class_policy, name)
        if meaning is None:
            raise ValueError(f"policy field classes.<class>.{alias} has no docstring")
        per_class = ", ".join(f"{cls} {code(flow(d.get(alias)))}" for cls, d in defaults.items())
        rows.append(Row(f"classes.<class>.{alias}", kind(info.annotation, info.metadata), per_class, meaning))
    about = (
        f"{_about(model)} Each class ({', '.join(code(c) for c in defaults)}) has the fields below; the default "
        "column gives each class's own."
    )
    yield Section("classes", about, tuple(rows), ())


def page(model: type[BaseModel] = Policy) -> str:
    """The whole page, for the policy `model`."""
    out = [
        GENERATED.format(source="gpupack/core/policy.py"),
        "# Policy reference\n",
        "Every field of the policy document (the ConfigMap `gpupack-policy`, key `policy.yaml`; the Helm chart's "
        "`policy` value). Names are camelCase; every field has a default, so `{}` is the whole default policy; "
        "an unknown field is an error. How the document is delivered, reloaded and rolled out: "
        "[Policy](../admins/policy.md).\n",
    ]
    for section in sections(model):
        title = "Top level" if not section.path else code(section.path)
        out.append(f"## {title}\n")
        if section.about:
            out.append(section.about + "\n")
        out.append(
            table(
                ("field", "type", "default", "meaning"),
                ((code(r.path), r.kind, r.default, r.meaning) for r in section.rows),
            )
        )
        for path, value in section.long_defaults:
            out.append(f"Default of {code(path)}:\n")
            out.append(_long_default(value))
    return "\n".join(out)


def _long_default(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keys = list(value[0])
        return table(keys, ([code(flow(v.get(k))) for k in keys] for v in value))
    if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        keys = list(next(iter(value.values())))
        return table(["name", *keys], ([code(n)] + [code(flow(v.get(k))) for k in keys] for n, v in value.items()))
    return f"```yaml\n{flow(value)}\n```\n"
