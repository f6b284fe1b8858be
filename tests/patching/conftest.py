"""Fixtures for the patching tests: a tiny Llama (random, seeded) and hand-made pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
from patching_reference import ioi_like

from mechscope.models import load_model

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


@pytest.fixture(scope="module")
def same_pair():
    """Same token length: only S2 differs."""
    return ioi_like("same-1", "Mary", "John", "Mary", "store")


@pytest.fixture(scope="module")
def diff_pair():
    """Different token lengths (another place word); the name spans still align."""
    return ioi_like("diff-1", "Mary", "John", "Mary", "store", corrupt_place="park")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
