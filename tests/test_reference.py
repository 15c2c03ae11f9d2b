"""The reference pages are the code's own words: the committed pages equal what `python -m gpupack.reference` writes,
and a change to what owns a fact (a policy field's docstring, a flag's help) changes the page, so the drift test
catches a change made without regenerating."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import gpupack.core.policy
from gpupack.core import contract
from gpupack.core.checkout import REPOSITORY
from gpupack.reference import policy as policy_page
from gpupack.reference.__main__ import main
from gpupack.reference.labels import developer_table
from gpupack.reference.pages import pages

DOCS = REPOSITORY / "docs"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return pages()


def test_every_committed_page_is_what_the_code_writes(generated: dict[str, str]) -> None:
    stale = [name for name, text in generated.items() if (DOCS / name).read_text(encoding="utf-8") != text]
    assert not stale, f"stale generated pages (run `make reference`): {', '.join(stale)}"


def test_no_page_is_left_behind_in_the_generated_folders(generated: dict[str, str]) -> None:
    written = {
        str(p.relative_to(DOCS)) for folder in ("reference", ".generated") for p in (DOCS / folder).rglob("*.md")
    }
    assert written == set(generated)


def changed_policy_module(old: str, new: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """gpupack/core/policy.py with one docstring's text replaced, imported under another name (kept in sys.modules
    for the test: the docstrings are read from the module's source)."""
    source = Path(gpupack.core.policy.__file__).read_text(encoding="utf-8")
    assert source.count(old) == 1
    path = tmp_path / "changed_policy.py"
    path.write_text(source.replace(old, new), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("changed_policy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "changed_policy", module)
    spec.loader.exec_module(module)
    return module


def test_a_policy_field_docstring_changed_without_the_page_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generated: dict[str, str]
) -> None:
    old = "Period of the background list of PriorityClasses and nodes."
    new = "How often PriorityClasses and nodes are listed again."
    changed = changed_policy_module(old, new, tmp_path, monkeypatch)
    page = policy_page.page(changed.Policy)
    assert page != generated["reference/policy.md"]
    assert new in page and old not in page
    assert page == generated["reference/policy.md"].replace(old, new)  # nothing else moved


def test_a_policy_field_without_a_docstring_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = '    """Period of the background list of PriorityClasses and nodes."""\n'
    changed = changed_policy_module(line, "", tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"cluster\.refreshSeconds .*has no docstring"):
        policy_page.page(changed.Policy)


def test_the_policy_page_gives_each_fields_default_and_bounds(generated: dict[str, str]) -> None:
    page = generated["reference/policy.md"]
    assert "| `extender.hotThreshold` | number (> 0, <= 1) | `0.85` |" in page
    assert (
        "| `classes.<class>.spot` | `require` or `prefer` or `forbid` | inference `forbid`, training `prefer`, " in page
    )
    assert "| `gpupack-batch` | `-100` | `Never` |" in page


def test_every_command_and_flag_has_its_page(generated: dict[str, str]) -> None:
    page = generated["reference/cli/simulate.md"]
    assert "`--compare-preemption`" in page and "`--scenario FILE.yaml`" in page
    assert {n for n in generated if n.startswith("reference/cli/")} >= {
        f"reference/cli/{c}.md" for c in ("webhook", "extender", "mutate", "certs", "simulate", "report", "mig-plan")
    }


def test_every_key_of_the_contract_is_on_the_labels_page(generated: dict[str, str]) -> None:
    assert all(f"`{key.name}`" in generated["reference/labels.md"] for key in contract.KEYS)


def test_the_readme_shows_the_labels_table_the_code_writes() -> None:
    assert developer_table() in (REPOSITORY / "README.md").read_text(encoding="utf-8")


def test_the_metrics_page_lists_what_the_services_export(generated: dict[str, str]) -> None:
    page = generated["reference/metrics.md"]
    for name in ("gpupack_webhook_admissions_total", "gpupack_extender_preempt_candidates_total",
                 "gpupack_extender_watch_relists_total", "gpupack_mig_apply_failures_total"):  # fmt: skip
        assert f"`{name}`" in page


def test_check_mode_names_a_stale_page_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--docs", str(tmp_path)]) == 0
    (tmp_path / "reference" / "labels.md").write_text("edited by hand\n", encoding="utf-8")
    assert main(["--docs", str(tmp_path), "--check"]) == 1
    assert "stale: docs/reference/labels.md" in capsys.readouterr().out
    assert (tmp_path / "reference" / "labels.md").read_text(encoding="utf-8") == "edited by hand\n"
