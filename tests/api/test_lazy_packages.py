"""Packages that import their exports on first use (:mod:`mechscope.lazy`): each export is
the object its module defines, importing a package imports none of them, and a name that
is also a submodule's stays the export, as when the package imported everything."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from mechscope.lazy import LazyPackage, exports_of

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = sorted(
    ".".join(init.parent.relative_to(SRC).parts)
    for init in SRC.glob("mechscope/**/__init__.py")
    if "lazy_package(__name__)" in init.read_text(encoding="utf-8")
)


def test_the_workflow_packages_are_lazy():
    expected = {"mechscope.lens", "mechscope.patching", "mechscope.heads", "mechscope.anchors"}
    expected |= {"mechscope.steering"}
    assert expected | {"mechscope.runs", "mechscope.models", "mechscope.data"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_export_is_its_modules_object(name):
    package = importlib.import_module(name)
    assert isinstance(package, LazyPackage)
    homes = exports_of(Path(package.__file__), name)
    assert set(package.__all__) <= set(homes), set(package.__all__) - set(homes)
    for export, home in homes.items():
        assert getattr(package, export) is getattr(importlib.import_module(home), export), export
    assert set(package.__all__) <= set(dir(package))


def test_a_name_shared_with_a_submodule_stays_the_export():
    """``heads.prepare`` is the function of ``heads/prepare.py``, and ``lens.aggregate`` the
    function of ``lens/run.py`` (not the module ``lens/aggregate.py``), also when the
    submodule was imported first (in a fresh interpreter, so nothing was before)."""
    code = """
import types
import mechscope.heads.prepare, mechscope.lens.aggregate
from mechscope import heads, lens
from mechscope.heads import prepare
assert not isinstance(prepare, types.ModuleType) and prepare is heads.prepare
from mechscope.heads.prepare import prepare as defined
assert prepare is defined
from mechscope.lens.run import aggregate
assert lens.aggregate is aggregate
assert not hasattr(lens, "no_such_name")
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_a_package_imports_none_of_its_exports():
    code = (
        f"import importlib, sys\nfor name in {PACKAGES!r}:\n    importlib.import_module(name)\n"
        "print(sorted({'torch', 'transformers', 'scipy', 'pandas'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
