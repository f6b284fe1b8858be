"""Fixtures for run-directory tests."""

from __future__ import annotations

import pytest

from mechscope.runs import RunDir


@pytest.fixture
def run(tmp_path) -> RunDir:
    """A fresh run directory under a temporary root."""
    return RunDir.create(tmp_path / "runs", "t", {"task": "unit", "n": 3}, seed=0, argv=["x"])
