"""Fixtures of the lens tests: the tiny seeded Llama and a two-condition sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny():
    from mechscope.models import load_model

    return load_model("tiny:llama")


@pytest.fixture(scope="session")
def engine(tiny):
    from mechscope.engine import Engine

    return Engine.of(tiny)
