"""Section registry and discovery of workflow report modules."""

from __future__ import annotations

import sys
import textwrap

import pytest

from mechscope.report import register_section, registered_sections, unregister_section
from mechscope.report.registry import WORKFLOWS, load_sections


def test_sections_sorted_by_order_then_key_and_replaceable(isolated_sections):
    register_section("b", "B", order=5)(lambda run: None)
    register_section("a", "A", order=5)(lambda run: None)
    register_section("z", "Z", order=1)(lambda run: None)
    assert [s.key for s in registered_sections()] == ["z", "a", "b"]
    register_section("z", "Z again", order=9)(lambda run: None)
    assert [(s.key, s.title) for s in registered_sections()][-1] == ("z", "Z again")
    unregister_section("z")
    assert [s.key for s in registered_sections()] == ["a", "b"]
    with pytest.raises(ValueError, match="section key"):
        register_section("Bad Key", "x")


@pytest.fixture
def fake_package(tmp_path, monkeypatch, isolated_sections):
    """``fakepkg`` with: lens/report.py (registers), patching/ without report, distill/ broken."""
    root = tmp_path / "fakepkg"
    for sub in ("", "lens", "patching", "distill", "anchors"):
        (root / sub).mkdir(exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "lens" / "report.py").write_text(
        textwrap.dedent(
            """
            from mechscope.report import register_section

            @register_section("fake-lens", "Fake lens", order=1)
            def section(run):
                return None
            """
        )
    )
    (root / "distill" / "report.py").write_text("import a_dependency_that_is_not_installed\n")
    (root / "anchors" / "report.py").write_text("raise RuntimeError('bug in anchors report')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakepkg"
    for name in [m for m in sys.modules if m == "fakepkg" or m.startswith("fakepkg.")]:
        del sys.modules[name]


def test_missing_modules_are_skipped_and_present_ones_register(fake_package):
    loaded = load_sections(("lens", "patching", "heads"), package=fake_package)
    assert loaded == ["fakepkg.lens.report"]
    assert [s.key for s in registered_sections()] == ["fake-lens"]


def test_broken_modules_raise(fake_package):
    with pytest.raises(ModuleNotFoundError, match="a_dependency_that_is_not_installed"):
        load_sections(("distill",), package=fake_package)
    with pytest.raises(RuntimeError, match="bug in anchors report"):
        load_sections(("anchors",), package=fake_package)


@pytest.mark.slow
def test_installed_workflow_sections_import_without_error():
    loaded = load_sections()
    assert set(loaded) <= {f"mechscope.{w}.report" for w in WORKFLOWS}
    for name in loaded:
        assert name in sys.modules
