"""The top-level API the README names: ``mechscope.load_model`` and ``mechscope.LoadedModel``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import mechscope
from mechscope.models import ALIASES, LoadedModel, load_model

README = Path(__file__).resolve().parents[2] / "README.md"


def test_load_model_is_exported_at_top_level() -> None:
    assert mechscope.load_model is load_model
    assert mechscope.LoadedModel is LoadedModel
    assert {"load_model", "LoadedModel"} <= set(mechscope.__all__)
    assert isinstance(mechscope.load_model("tiny:llama"), mechscope.LoadedModel)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = mechscope.no_such_thing  # type: ignore[attr-defined]


def test_import_mechscope_stays_light() -> None:
    """``import mechscope`` (the CLI's first import) must not pull torch or transformers:
    the exports load on first use."""
    code = "import sys, mechscope; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_readme_names_every_alias() -> None:
    text = README.read_text()
    section = text[text.index("## Models") : text.index("## Command line")]
    assert "`mechscope.load_model(spec)`" in section
    for alias in ALIASES:
        assert re.search(rf"`{re.escape(alias)}`", section), alias
