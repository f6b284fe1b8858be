"""Samples for head attribution and a mixed prompt set (IOI, facts, GSM8K, HumanEval).

The note's diagnosis was that one task (masked LM on one instruction set) cannot show
whether head importance depends on the data; its fourth remedy is task diversity. A
:class:`HeadSample` is a prompt with a completion to score (NLL, masked-diffusion loss) and,
for contrastive tasks, a correct and a wrong answer (logit difference).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mechscope.data.datasets import require_dataset
from mechscope.data.loaders import read_jsonl, require_str
from mechscope.data.tasks import check_task, tasks_of
from mechscope.data.tokens import answer_token_ids, encode
from mechscope.errors import InputError

TASKS: tuple[str, ...] = tasks_of("heads")  # the registry's (mechscope.data.tasks)


@dataclass(frozen=True)
class HeadSample:
    """A prompt and what to score after it."""

    id: str
    task: str
    prompt: str
    completion: str
    correct: str | None = None
    wrong: str | None = None


def load_samples(path: str | Path) -> list[HeadSample]:
    """JSONL with ``id``, ``prompt`` and ``completion`` (and optional ``task``,
    ``correct``, ``wrong``); a missing completion falls back to ``correct``."""
    out, seen = [], set()
    for i, rec in enumerate(read_jsonl(path, required=("prompt",))):
        sid = str(rec.get("id", f"sample-{i}"))
        if sid in seen:
            raise InputError("a unique id", sample=sid, field="id")
        seen.add(sid)
        completion = rec.get("completion", rec.get("correct"))
        if not isinstance(completion, str) or not completion:
            raise InputError(
                "a non-empty completion (or correct answer); the selection is empty",
                sample=sid,
                field="completion",
            )
        out.append(
            HeadSample(
                sid,
                str(rec.get("task", "custom")),
                require_str(rec, "prompt", sid),
                completion,
                rec.get("correct"),
                rec.get("wrong"),
            )
        )
    if not out:
        raise InputError("at least one sample", sample=str(path), field="samples")
    return out


def _fits(tokenizer: Any, s: HeadSample, max_tokens: int) -> bool:
    try:
        n = len(encode(tokenizer, s.prompt).ids)
        comp = answer_token_ids(tokenizer, s.prompt, s.completion)
    except InputError:
        return False
    return n + len(comp) <= max_tokens


def _ioi(n: int, seed: int) -> list[HeadSample]:
    from mechscope.data.ioi import generate_ioi

    # no tokenizer filter: the NLL scores every token of a name, and the logit difference
    # objective checks that the two names start with different tokens
    pairs = generate_ioi(max(3 * n, 6), seed=seed)
    return [HeadSample(p.id, "ioi", p.clean, p.correct, p.correct, p.wrong) for p in pairs]


def _facts(seed: int) -> list[HeadSample]:
    from mechscope.data.facts import load_known_facts

    path = require_dataset("known_1000.json")
    facts = load_known_facts(path)
    by_rel: dict[str, list[str]] = {}
    for f in facts:
        by_rel.setdefault(f.relation_id, []).append(f.attribute)
    rng = random.Random(seed)
    out = []
    for f in facts:
        others = [a for a in by_rel[f.relation_id] if a.split()[:1] != f.attribute.split()[:1]]
        wrong = " " + rng.choice(others) if others else None
        out.append(HeadSample(f.id, "facts", f.prompt, " " + f.attribute, " " + f.attribute, wrong))
    return out


def _gsm8k(words: int = 8) -> list[HeadSample]:
    from mechscope.data.math import load_gsm8k

    path = require_dataset("gsm8k_test.jsonl")
    out = []
    for p in load_gsm8k(path):
        first = " ".join(p.solution.split()[:words])
        out.append(HeadSample(p.id, "gsm8k", f"Question: {p.problem}\nAnswer:", " " + first))
    return out


def short_humaneval_prompt(prompt: str, entry_point: str) -> str:
    """The ``def`` line of ``entry_point`` and the docstring's first line, closed: a HumanEval
    prompt short enough for gradient passes (imports and examples are dropped)."""
    lines = prompt.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"def {entry_point}(")), None)
    if start is None:
        return prompt.rstrip("\n")
    end = start
    while not lines[end].rstrip().endswith(":") and end + 1 < len(lines):
        end += 1  # multi-line signatures
    doc = lines[end + 1].rstrip() if end + 1 < len(lines) else ""
    quote = doc.lstrip()[:3]
    if quote not in ('"""', "'''"):
        return "\n".join(lines[start : end + 1])
    body = doc if doc.count(quote) >= 2 else doc + "\n    " + quote
    return "\n".join([*lines[start : end + 1], body])


def _humaneval() -> list[HeadSample]:
    from mechscope.data.humaneval import load_humaneval_problems

    out = []
    for tid, p in load_humaneval_problems().items():
        lines = [ln for ln in p.solution.splitlines() if ln.strip()]
        if lines:
            sid = "humaneval-" + tid.split("/")[-1]
            prompt = short_humaneval_prompt(p.prompt, p.entry_point)
            # the newline goes with the completion: tokenizers merge "\n" with indentation
            out.append(HeadSample(sid, "humaneval", prompt, "\n" + lines[0]))
    return out


#: How heads builds the samples of each task it takes (``TASKS``, from the registry), from
#: the number wanted per task and the seed.
BUILDERS: dict[str, Callable[[int, int], list[HeadSample]]] = {
    "ioi": _ioi,
    "facts": lambda n, seed: _facts(seed),
    "gsm8k": lambda n, seed: _gsm8k(),
    "humaneval": lambda n, seed: _humaneval(),
}


def mixed_prompt_set(
    tokenizer: Any,
    *,
    n_per_task: int = 4,
    seed: int = 0,
    tasks: tuple[str, ...] = TASKS,
    max_tokens: int = 64,
) -> tuple[list[HeadSample], list[str]]:
    """Up to ``n_per_task`` samples of each task whose prompt + completion fit ``max_tokens``
    (drawn with ``seed``), and notes on tasks that were skipped (e.g. a missing file)."""
    samples: list[HeadSample] = []
    notes: list[str] = []
    for task in tasks:
        check_task(task, "heads", field="tasks")
        try:
            pool = BUILDERS[task](n_per_task, seed)
        except (InputError, ImportError) as exc:
            notes.append(f"task {task!r} skipped: {exc}")
            continue
        pool = sorted(pool, key=lambda s: len(s.prompt))[: max(50 * n_per_task, 200)]
        random.Random(seed).shuffle(pool)
        chosen: list[HeadSample] = []
        for s in pool:
            if len(chosen) == n_per_task:
                break
            if _fits(tokenizer, s, max_tokens):
                chosen.append(s)
        if len(chosen) < n_per_task:
            notes.append(
                f"task {task!r}: {len(chosen)} of {n_per_task} samples fit {max_tokens} tokens"
            )
        samples += chosen
    return samples, notes
