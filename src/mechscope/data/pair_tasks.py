"""Contrastive pairs from a file or a built-in task, for every workflow that takes pairs.

A JSONL line is either a contrastive pair (``clean``, ``corrupt``, ``correct``, ``wrong``,
``spans``, ``corrupt_spans``, as :meth:`ContrastivePair.to_dict` writes it) or a pair
written from the base's point of view: ``base``, ``source``, ``target`` (the source's
answer), ``wrong`` (the base's answer) and optional ``base_spans`` / ``source_spans``
(character ranges by name), read as clean = source, corrupt = base. The built-in tasks
that give pairs (``ioi``, ``ioi-json``, ``facts``) are built here once; which workflow
takes which is the registry's (:mod:`mechscope.data.tasks`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mechscope.data.datasets import require_dataset
from mechscope.data.ioi import generate_ioi, load_ioi_json
from mechscope.data.loaders import iter_jsonl
from mechscope.data.pairs import ContrastivePair, first_token_answers
from mechscope.data.tasks import check_task
from mechscope.errors import InputError


def pair_from_record(record: dict[str, Any], where: str) -> ContrastivePair:
    """One JSONL record of text in either form (module docstring)."""
    if "base" in record or "source" in record:
        for key in ("base", "source", "target", "wrong"):
            if key not in record:
                raise InputError("expected this field to be present", sample=where, field=key)
        record = {
            "id": record.get("id", where),
            "task": record.get("task", "custom"),
            "clean": record["source"],
            "corrupt": record["base"],
            "correct": record["target"],
            "wrong": record["wrong"],
            "spans": record.get("source_spans", {}),
            "corrupt_spans": record.get("base_spans", {}),
            "metadata": record.get("metadata", {}),
        }
    else:
        record = {"task": "custom", "spans": {}, "corrupt_spans": {}, **record}
        record.setdefault("id", where)
    return ContrastivePair.from_dict(record)


def load_pairs(path: str | Path) -> list[ContrastivePair]:
    """Text pairs from a JSONL file; errors name the line (or the pair id)."""
    return [
        pair_from_record(record, f"{Path(path).name} line {lineno}")
        for lineno, record in iter_jsonl(path)
    ]


def _ioi_json(n: int, tokenizer: Any, seed: int) -> list[ContrastivePair]:
    pairs = load_ioi_json(require_dataset("ioi_prompts.json", field="task"), seed=seed)
    kept, _ = first_token_answers(pairs, tokenizer)
    return kept[:n]


def _facts(n: int, tokenizer: Any, seed: int) -> list[ContrastivePair]:
    from mechscope.data.facts import build_fact_pairs, load_known_facts

    facts = load_known_facts(require_dataset("known_1000.json", field="task"))
    return build_fact_pairs(facts, tokenizer, seed=seed, same_length=True)[:n]


#: How each pair task is built: ``(n, tokenizer, seed) -> pairs``.
PAIR_BUILDERS: dict[str, Callable[[int, Any, int], list[ContrastivePair]]] = {
    "ioi": lambda n, tokenizer, seed: generate_ioi(n, seed=seed, tokenizer=tokenizer),
    "ioi-json": _ioi_json,
    "facts": _facts,
}


def task_pairs(
    task: str, n: int, tokenizer: Any, *, workflow: str, seed: int = 0
) -> list[ContrastivePair]:
    """Built-in pairs of ``task``, refused in one line unless ``workflow`` takes it:
    ``ioi`` (generator, names single-token for ``tokenizer``), ``ioi-json``
    (``ioi_prompts.json``), ``facts`` (``known_1000.json``, clean and corrupt of one
    token length); files are found by :func:`mechscope.data.datasets.require_dataset`."""
    check_task(task, workflow)
    return PAIR_BUILDERS[task](n, tokenizer, seed)
