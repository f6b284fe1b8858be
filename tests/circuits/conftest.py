"""Fixtures for the edge-circuit tests: tiny seeded models and a batch of random pairs."""

from __future__ import annotations

import pytest
import torch

from mechscope.circuits.data import EdgeBatch


def random_batch(rows: int = 2, seq: int = 6, seed: int = 0) -> EdgeBatch:
    """Random prompts whose corrupt twin differs at one position; random answer tokens."""
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, 200, (rows, seq), generator=gen)
    corrupt = clean.clone()
    corrupt[:, 2] = torch.randint(5, 200, (rows,), generator=gen)
    labels = torch.randint(5, 200, (rows, 2), generator=gen)
    ids = tuple(f"r{i}" for i in range(rows))
    return EdgeBatch(clean, corrupt, torch.ones_like(clean), labels, ids)


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
