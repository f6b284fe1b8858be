"""Sweeps: many intervention variants packed into the batch dimension, in memory-sized chunks.

A workflow describes its variants as a list; :func:`rows_per_chunk` says how many fit in one
forward under a memory budget, and :func:`run_chunks` runs them with a progress bar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from mechscope.models.loaded import LoadedModel
from mechscope.progress import make_progress

T = TypeVar("T")
R = TypeVar("R")

def bytes_per_row(lm: LoadedModel, seq_len: int, *, logits_positions: int = 1) -> int:
    """Peak activation bytes one batch row needs in an inference forward (an estimate).

    Counts the live residual stream and MLP hidden of one layer, one attention score block,
    and the logits kept; weights are not counted.
    """
    itemsize = 4 if lm.dtype.is_floating_point and lm.dtype.itemsize >= 4 else 2
    d_ff = getattr(lm.model.config, "intermediate_size", None) or 4 * lm.d_model
    per_token = (6 * lm.d_model + 3 * d_ff) * itemsize
    attn = lm.n_heads * seq_len * seq_len * 4
    logits = logits_positions * lm.vocab_size * 4
    return seq_len * per_token + attn + logits


def rows_per_chunk(
    lm: LoadedModel,
    seq_len: int,
    *,
    budget_bytes: int | None = None,
    logits_positions: int = 1,
    max_rows: int = 512,
) -> int:
    """How many variant rows fit in one forward under ``budget_bytes`` (default: the model's
    memory budget, ``lm.memory_budget``)."""
    budget = budget_bytes or lm.memory_budget
    per_row = bytes_per_row(lm, seq_len, logits_positions=logits_positions)
    return max(1, min(max_rows, budget // per_row))


def chunked(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run_chunks(
    items: Sequence[T],
    fn: Callable[[Sequence[T]], R],
    *,
    size: int,
    description: str,
) -> list[R]:
    """``fn`` over consecutive chunks of ``items`` with a progress bar counting items."""
    results: list[R] = []
    with make_progress() as progress:
        task = progress.add_task(description, total=len(items))
        for chunk in chunked(items, size):
            results.append(fn(chunk))
            progress.advance(task, len(chunk))
    return results
