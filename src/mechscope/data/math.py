"""Arithmetic contrastive pairs and loaders for GSM8K and MATH-500.

Pairs: ``"12 + 7 ="`` → ``" 19"``; the corrupt prompt changes one operand
(``"12 + 8 ="`` → ``" 20"``), and ``wrong`` is the corrupt prompt's answer. Many
tokenizers split numbers into digits or put the space in its own token (Llama 3, Qwen);
``answer_space=False`` moves the space into the prompt (``"12 + 7 = "`` → ``"19"``), and
with a ``tokenizer`` only pairs whose two answers are single, distinct tokens are kept.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechscope.data.loaders import iter_jsonl, require_str
from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import last_word_span, render
from mechscope.data.tokens import answer_token_ids
from mechscope.errors import InputError

# Templates: {a} and {b} are operands; the prompt ends where the answer starts.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "+": ("{a} + {b} =", "If John has {a} apples and gets {b} more, he has"),
    "-": ("{a} - {b} =", "If John has {a} apples and gives away {b}, he has"),
}
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}


def _arith_pair(
    pid: str,
    template: str,
    op: str,
    a: int,
    b: int,
    a2: int,
    b2: int,
    answer_space: bool,
    meta: dict[str, Any],
) -> ContrastivePair:
    tail = "" if answer_space else " "
    clean, cs = render(template + tail, {"a": str(a), "b": str(b)}, sample=pid)
    corrupt, ks = render(template + tail, {"a": str(a2), "b": str(b2)}, sample=pid)
    lead = " " if answer_space else ""
    cs["end"], ks["end"] = last_word_span(clean), last_word_span(corrupt)
    return ContrastivePair(
        id=pid,
        task="math",
        clean=clean,
        corrupt=corrupt,
        correct=lead + str(_OPS[op](a, b)),
        wrong=lead + str(_OPS[op](a2, b2)),
        spans=cs,
        corrupt_spans=ks,
        metadata={"op": op, "a": a, "b": b, "corrupt_a": a2, "corrupt_b": b2, **meta},
    )


def _single_tokens(pair: ContrastivePair, tokenizer: Any) -> bool:
    try:
        c = answer_token_ids(tokenizer, pair.clean, pair.correct)
        w = answer_token_ids(tokenizer, pair.clean, pair.wrong)
    except InputError:
        return False
    return len(c) == 1 and len(w) == 1 and c != w


def generate_arithmetic(
    n: int,
    *,
    seed: int = 0,
    tokenizer: Any = None,
    ops: Sequence[str] = ("+", "-"),
    operand_range: tuple[int, int] = (1, 20),
    word_problems: bool = False,
    answer_space: bool = True,
    max_attempts: int = 100_000,
) -> list[ContrastivePair]:
    """``n`` arithmetic pairs with non-negative answers, reproducible from ``seed``.

    One operand (chosen at random) changes in the corrupt prompt, so exactly one of the
    spans ``a`` / ``b`` is modified. ``word_problems`` uses the sentence templates. With a
    ``tokenizer``, pairs whose answers are not single distinct tokens are resampled;
    :class:`InputError` if ``n`` cannot be reached in ``max_attempts`` draws.
    """
    if any(op not in _OPS for op in ops) or not ops:
        raise InputError(f"expected ops from {sorted(_OPS)}, got {list(ops)}", field="ops")
    lo, hi = operand_range
    if not 0 <= lo < hi:
        raise InputError(f"expected 0 <= low < high, got {operand_range}", field="operand_range")
    rng = random.Random(seed)
    pairs: list[ContrastivePair] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > max_attempts:
            raise InputError(
                f"expected {n} pairs with single-token answers, found {len(pairs)}"
                f" in {max_attempts} draws",
                field="tokenizer",
            )
        op = ops[len(pairs) % len(ops)]
        t_idx = 1 if word_problems else 0
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if op == "-" and b > a:
            a, b = b, a
        changed = rng.choice(("a", "b"))
        new = rng.randint(lo, hi)
        a2, b2 = (new, b) if changed == "a" else (a, new)
        if (a2, b2) == (a, b) or _OPS[op](a2, b2) < 0 or _OPS[op](a2, b2) == _OPS[op](a, b):
            continue
        pair = _arith_pair(
            f"math-{seed}-{len(pairs):05d}",
            TEMPLATES[op][t_idx],
            op,
            a,
            b,
            a2,
            b2,
            answer_space,
            {"changed": changed, "template_index": t_idx, "seed": seed},
        )
        if tokenizer is None or _single_tokens(pair, tokenizer):
            pairs.append(pair)
    return pairs


@dataclass(frozen=True)
class MathProblem:
    """A word problem with its reference solution and normalised final answer: the one
    problem type of every workflow (attribution's GSM8K samples, the anchors' problems,
    whose ``solution`` is empty where only the gold answer is known). A reply is graded
    against ``answer`` by :mod:`mechscope.data.math_answers`; a code problem is
    :class:`mechscope.data.code.CodeProblem`."""

    id: str
    problem: str
    solution: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)


_GSM_FINAL = re.compile(r"####\s*(.+?)\s*$")


def load_gsm8k(path: str | Path) -> list[MathProblem]:
    """GSM8K JSONL (``question``, ``answer`` ending in ``#### N``); gold = N without commas."""
    out = []
    for lineno, rec in iter_jsonl(path, required=("question", "answer")):
        sample = f"gsm8k line {lineno}"
        question = require_str(rec, "question", sample)
        answer = require_str(rec, "answer", sample)
        m = _GSM_FINAL.search(answer.strip())
        if m is None:
            raise InputError(
                "expected the answer to end with '#### <number>'", sample=sample, field="answer"
            )
        gold = m.group(1).replace(",", "").strip()
        out.append(MathProblem(f"gsm8k-{len(out)}", question, answer, gold, {"line": lineno}))
    return out


def load_math500(path: str | Path) -> list[MathProblem]:
    """MATH-500 JSONL (``problem``, ``solution``, ``answer``, ``subject``, ``level``, ...)."""
    out = []
    for lineno, rec in iter_jsonl(path, required=("problem", "solution", "answer")):
        sample = str(rec.get("unique_id", f"math500 line {lineno}"))
        problem = require_str(rec, "problem", sample)
        solution = require_str(rec, "solution", sample)
        answer = require_str(rec, "answer", sample)
        meta = {k: v for k, v in rec.items() if k not in ("problem", "solution", "answer")}
        out.append(MathProblem(sample, problem, solution, answer.strip(), meta))
    return out
