"""Where patching's pairs come from: a JSONL file (text pairs, as
:mod:`mechscope.data.pair_tasks` reads them, or multimodal ones), or a built-in task.

A base/source record whose ``base`` and ``source`` are objects with a ``prompt`` and an
``audio`` or ``image`` file is a multimodal pair (:mod:`mechscope.patching.modal`); every
other record is a text pair.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mechscope.data.loaders import iter_jsonl
from mechscope.data.pair_tasks import PAIR_BUILDERS
from mechscope.data.pair_tasks import pair_from_record as text_pair
from mechscope.data.pair_tasks import task_pairs as pair_task_pairs
from mechscope.data.pairs import ContrastivePair
from mechscope.data.tasks import tasks_of
from mechscope.patching.modal_pairs import ModalPair, is_modal_record, modal_pair_from_record

TASKS = tasks_of("patching")  # the registry's (mechscope.data.tasks)


def pair_from_record(
    record: dict[str, Any], where: str, base_dir: Path | None = None
) -> ContrastivePair | ModalPair:
    """One JSONL record: multimodal (its paths relative to ``base_dir``) or text."""
    if is_modal_record(record):
        return modal_pair_from_record(record, where, base_dir or Path.cwd())
    return text_pair(record, where)


def load_pairs_jsonl(path: str | Path) -> list[ContrastivePair | ModalPair]:
    """Pairs from a JSONL file; errors name the line (or the pair id)."""
    out = []
    base_dir = Path(path).resolve().parent
    for lineno, record in iter_jsonl(path):
        out.append(pair_from_record(record, f"{Path(path).name} line {lineno}", base_dir))
    return out


#: The pair tasks patching builds (``TASKS``, from the registry).
BUILDERS = {name: PAIR_BUILDERS[name] for name in TASKS}


def task_pairs(task: str, n: int, tokenizer: Any, *, seed: int = 0) -> list[ContrastivePair]:
    """Built-in pairs (:func:`mechscope.data.pair_tasks.task_pairs`)."""
    return pair_task_pairs(task, n, tokenizer, workflow="patching", seed=seed)
