"""Fixtures for the edge-circuit tests: tiny seeded models and a batch of random pairs."""

from __future__ import annotations

import pytest
import torch

from circuit_fixtures import random_batch
from mechscope.circuits.data import EdgeBatch


@pytest.fixture(scope="module")
def batch() -> EdgeBatch:
    return random_batch()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
