"""The everyday kit: one import, every name documented in the generated API reference."""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mechscope

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "api_docs.py"


def test_every_export_resolves_to_a_documented_object_from_its_module() -> None:
    assert mechscope.__all__ == sorted(mechscope.EXPORTS)
    for name in mechscope.__all__:
        obj = getattr(mechscope, name)
        assert (inspect.getdoc(obj) or "").strip(), name
        home = mechscope.EXPORTS[name]
        assert getattr(importlib.import_module(home), name) is obj, name


def test_import_mechscope_and_help_stay_free_of_torch() -> None:
    code = (
        "import sys, mechscope; mechscope.__all__; dir(mechscope);"
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(importlib.util.find_spec("pdoc") is None, reason="pdoc not installed")
def test_api_reference_documents_every_public_name(tmp_path: Path) -> None:
    """``make docs-api``'s script, on the top-level module: each name of ``__all__`` has a
    section whose docstring is rendered."""
    spec = importlib.util.spec_from_file_location("api_docs", SCRIPT)
    api_docs = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(api_docs)  # type: ignore[union-attr]
    page = api_docs.build(tmp_path, ("mechscope",)).read_text()
    sections = re.split(r'<section id="', page)[1:]
    documented = {}
    for section in sections:
        name = section.split('"', 1)[0]
        documented[name] = 'class="docstring"' in section
    missing = [n for n in mechscope.__all__ if not documented.get(n)]
    assert not missing, f"no docstring in the reference for {missing}"
