"""Attribute docstrings: the string literal under an annotated class attribute or a module constant, the way
pydantic's `use_attribute_docstrings` and Sphinx read them. The code documents its fields there, so the
reference reads them from the source instead of a second copy."""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from functools import cache
from types import ModuleType


def _attribute_docs(body: list[ast.stmt]) -> dict[str, str]:
    docs: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        name = None
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            name = target.id if isinstance(target, ast.Name) else None
        if (
            name is not None
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[name] = inspect.cleandoc(following.value.value)
    return docs


@cache
def of_class(cls: type) -> dict[str, str]:
    """Each attribute of `cls` (not its bases) with the docstring under it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return _attribute_docs(node.body)


def of_module(module: ModuleType) -> dict[str, str]:
    """Each module-level name of `module` with the docstring under it."""
    return _attribute_docs(ast.parse(inspect.getsource(module)).body)
