"""Where pairs come from: a generic JSONL file, or a built-in task.

A JSONL line is either a contrastive pair (``clean``, ``corrupt``, ``correct``, ``wrong``,
``spans``, ``corrupt_spans``, as :meth:`ContrastivePair.to_dict` writes it) or a
patching pair written from the base's point of view: ``base``, ``source``, ``target``
(the source's answer), ``wrong`` (the base's answer) and optional ``base_spans`` /
``source_spans`` (character ranges by name). The latter is read as clean = source,
corrupt = base, so denoising patches source into base as written. Its ``base`` and
``source`` may also be objects with a ``prompt`` and an ``audio`` or ``image`` file: a
multimodal pair (:mod:`mechscope.patching.modal`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mechscope.data.datasets import require_dataset
from mechscope.data.ioi import generate_ioi, load_ioi_json
from mechscope.data.loaders import iter_jsonl
from mechscope.data.pairs import ContrastivePair, first_token_answers
from mechscope.data.tasks import check_task, tasks_of
from mechscope.errors import InputError
from mechscope.patching.modal_pairs import ModalPair, is_modal_record, modal_pair_from_record

TASKS = tasks_of("patching")  # the registry's (mechscope.data.tasks)


def pair_from_record(
    record: dict[str, Any], where: str, base_dir: Path | None = None
) -> ContrastivePair | ModalPair:
    """One JSONL record in either form (see the module docstring); a base/source record
    whose sides are objects naming an audio or image file is a multimodal pair
    (:mod:`mechscope.patching.modal`; its paths are relative to ``base_dir``)."""
    if is_modal_record(record):
        return modal_pair_from_record(record, where, base_dir or Path.cwd())
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


def load_pairs_jsonl(path: str | Path) -> list[ContrastivePair | ModalPair]:
    """Pairs from a JSONL file; errors name the line (or the pair id)."""
    out = []
    base_dir = Path(path).resolve().parent
    for lineno, record in iter_jsonl(path):
        out.append(pair_from_record(record, f"{Path(path).name} line {lineno}", base_dir))
    return out


def _ioi_json(n: int, tokenizer: Any, seed: int) -> list[ContrastivePair]:
    pairs = load_ioi_json(require_dataset("ioi_prompts.json", field="task"), seed=seed)
    kept, _ = first_token_answers(pairs, tokenizer)
    return kept[:n]


def _facts(n: int, tokenizer: Any, seed: int) -> list[ContrastivePair]:
    from mechscope.data.facts import build_fact_pairs, load_known_facts

    facts = load_known_facts(require_dataset("known_1000.json", field="task"))
    return build_fact_pairs(facts, tokenizer, seed=seed, same_length=True)[:n]


#: How patching builds the pairs of each task it takes (``TASKS``, from the registry).
BUILDERS: dict[str, Callable[[int, Any, int], list[ContrastivePair]]] = {
    "ioi": lambda n, tokenizer, seed: generate_ioi(n, seed=seed, tokenizer=tokenizer),
    "ioi-json": _ioi_json,
    "facts": _facts,
}


def task_pairs(task: str, n: int, tokenizer: Any, *, seed: int = 0) -> list[ContrastivePair]:
    """Built-in pairs: ``ioi`` (generator, names single-token for ``tokenizer``),
    ``ioi-json`` (``ioi_prompts.json``), ``facts`` (``known_1000.json``); files are found by
    :func:`mechscope.data.datasets.require_dataset`."""
    check_task(task, "patching")
    return BUILDERS[task](n, tokenizer, seed)
