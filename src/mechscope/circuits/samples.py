"""Where a circuit run's pairs come from: a JSONL file of text pairs or a built-in task
(:mod:`mechscope.data.pair_tasks`); every pair's clean and corrupt prompts must have the
same token length, since an edge is patched position by position (checked before any
model work, one line naming the pair)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mechscope.circuits.data import EdgeBatch, batches
from mechscope.data.pair_tasks import PAIR_BUILDERS, load_pairs, task_pairs
from mechscope.data.pairs import ContrastivePair
from mechscope.data.tasks import tasks_of
from mechscope.errors import InputError

TASKS = tasks_of("circuits")  # the registry's (mechscope.data.tasks)

#: The pair tasks a circuit run builds.
BUILDERS = {name: PAIR_BUILDERS[name] for name in TASKS}


def load_circuit_pairs(
    pairs: Path | None, task: str | None, n: int, tokenizer: Any, *, seed: int = 0
) -> list[ContrastivePair]:
    """The pairs of ``pairs`` (a file) or of ``task`` (``n`` of them), exactly one given."""
    if (pairs is None) == (task is None):
        raise InputError("expected exactly one of --pairs FILE or --task NAME", field="pairs")
    if pairs is not None:
        return load_pairs(pairs)
    return task_pairs(task, n, tokenizer, workflow="circuits", seed=seed)  # type: ignore[arg-type]


def pair_batches(pairs: list[ContrastivePair], tokenizer: Any, batch: int) -> list[EdgeBatch]:
    """Tokenised batches (each pair checked, in order); at least two pairs (the intervals
    resample them)."""
    out = batches(pairs, tokenizer, batch)
    if len(pairs) < 2:
        raise InputError(f"at least 2 pairs, got {len(pairs)}", field="pairs")
    return out
