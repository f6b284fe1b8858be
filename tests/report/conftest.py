"""Fixtures for report tests: a run directory and an isolated section registry."""

from __future__ import annotations

import pytest

from mechscope.report import sections
from mechscope.runs import RunDir


@pytest.fixture
def run(tmp_path) -> RunDir:
    return RunDir.create(
        tmp_path / "runs",
        "report-test",
        {"task": "toy"},
        model_spec="tiny:llama",
        model_fingerprint="0123456789abcdef" * 4,
        seed=3,
        argv=["mechscope", "lens", "--config", "toy.yaml"],
    )


@pytest.fixture
def isolated_sections(monkeypatch):
    """An empty section registry for the test; the real one is restored afterwards."""
    monkeypatch.setattr(sections, "_SECTIONS", {})
    return sections
