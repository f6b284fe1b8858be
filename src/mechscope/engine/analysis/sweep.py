"""Sweeps: many intervention variants packed into the batch dimension, in memory-sized chunks.

A workflow describes its variants as a list; :func:`rows_per_chunk` says how many fit in one
forward under a memory budget (counted by :mod:`mechscope.engine.analysis.memory_model`), and
:func:`run_chunks` runs them with a progress bar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from mechscope.engine.analysis.memory_model import Dims, Pass, fit_rows, pass_bytes
from mechscope.models.loaded import LoadedModel
from mechscope.progress import make_progress

T = TypeVar("T")
R = TypeVar("R")


def rows_per_chunk(
    lm: LoadedModel,
    seq_len: int,
    *,
    budget_bytes: int | None = None,
    logits_positions: int = 1,
    max_rows: int = 512,
    held_bytes: int = 0,
    **shape: Any,
) -> int:
    """How many variant rows of one inference forward over ``seq_len`` positions fit in
    ``budget_bytes`` (default: the model's budget, ``lm.memory_budget``) beside
    ``held_bytes`` the caller keeps meanwhile. ``shape``: the rest of the pass
    (:class:`~mechscope.engine.analysis.memory_model.Pass`: ``keys``, ``explicit``, ``cache``, …),
    counted by :func:`~mechscope.engine.analysis.memory_model.pass_bytes`."""
    budget = budget_bytes or lm.memory_budget
    dims = Dims.of(lm)

    def nbytes(rows: int) -> int:
        p = Pass(rows=rows, tokens=seq_len, logits=logits_positions, **shape)
        return held_bytes + pass_bytes(dims, p)

    return fit_rows(nbytes, budget, max_rows).rows


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
