"""The custom experiment written from the recipes page (``examples/io_direction_heads.py``)
runs on smollm2-135m IOI pairs and finds heads whose direct IO − S write drops under
corruption; the table and the figure are written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two cached runs and a dozen patched passes of a 135M model

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "io_direction_heads.py"


def test_io_direction_heads_runs(smollm2, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("io_direction_heads", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.main(["--n", "2", "--top", "2", "--out", str(tmp_path)])
    assert list(table.columns) == ["head", "direct_drop", "patched_drop"]
    assert len(table) == 2 and table["direct_drop"].iloc[0] >= table["direct_drop"].iloc[1] > 0
    assert (tmp_path / "heads.csv").exists() and (tmp_path / "heads.html").exists()
