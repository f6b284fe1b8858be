"""The tiny seeded Llama and its engine as session fixtures, for the folders that use them.

A folder's ``conftest.py`` imports them (``from tiny_fixtures import engine, tiny``); this
folder is on ``sys.path`` because its ``conftest.py`` is the root one.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny():
    from mechscope.models import load_model

    return load_model("tiny:llama")


@pytest.fixture(scope="session")
def engine(tiny):
    from mechscope.engine import Engine

    return Engine.of(tiny)
