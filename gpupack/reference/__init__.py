"""The reference pages of the documentation site, written from the code that owns each fact.

`python -m gpupack.reference` (`make docs-reference`) writes `docs/reference/` and the tables the hand-written pages
include (`docs/.generated/`); `tests/test_reference.py` fails when a committed page differs from what the code
writes, so a policy field's docstring, a flag's help, a label's meaning or a metric's help text is written once,
in the code, and the site follows it.
"""
