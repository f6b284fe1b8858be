"""Batches of random pairs for the edge-circuit tests (and the result contract's)."""

from __future__ import annotations

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
