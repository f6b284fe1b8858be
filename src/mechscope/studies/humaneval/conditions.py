"""The prompt conditions of the HumanEval tool-response study, one set per task.

Every task gets ``assisted`` (the task alone) and, per *variant*, an ``agentic`` condition:
the same user turn, a ``read_file`` call, and a tool response whose content is

- ``tests``: the task's own unit tests (the real tool response);
- ``spec``: the task's own specification (its HumanEval prompt) again — no new information;
- ``other_tests``: tests of other tasks, cut to the same number of tokens as the real tests
  (information of the same kind and length, but wrong for this task);
- ``empty``: nothing.

The conditions come from :func:`mechscope.data.humaneval.build_humaneval_samples`; this
module only swaps the tool response's content and adds a ``task`` segment (the user turn)
next to ``tool_response``, so attention mass can be split between the task and the tool.
An empty tool response has no tokens, so it has no ``tool_response`` segment (its mass on
the tool response is 0 by construction).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from typing import Any

from mechscope.data.code import CodeProblem
from mechscope.data.humaneval import build_humaneval_samples
from mechscope.errors import InputError
from mechscope.lens.samples import LensSample

VARIANTS = ("tests", "spec", "other_tests", "empty")
TOOL = "tool_response"
TASK = "task"
SEPARATOR = "\n\n"


def token_count(tokenizer: Any, text: str) -> int:
    """Tokens of ``text`` on its own (no special tokens)."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def length_matched_tests(
    problems: Mapping[str, CodeProblem],
    task_id: str,
    n_tokens: int,
    tokenizer: Any,
    seed: int,
) -> tuple[str, list[str]]:
    """Tests of other tasks, joined in a seeded order and cut to ``n_tokens`` tokens.

    The order depends only on ``seed`` and ``task_id`` (not on which tasks a run selects),
    so a ``--limit`` run and a full run give a task the same control. Returns the text and
    the tasks it was taken from.
    """
    others = [t for t in problems if t != task_id]
    if not others:
        raise InputError("expected at least two tasks for 'other_tests'", field="problems")
    random.Random(f"{seed}:{task_id}").shuffle(others)
    ids: list[int] = []
    used: list[str] = []
    for other in others:
        if len(ids) >= n_tokens:
            break
        piece = (SEPARATOR if ids else "") + problems[other].test
        ids += tokenizer(piece, add_special_tokens=False)["input_ids"]
        used.append(other)
    if len(ids) < n_tokens:
        raise InputError(
            f"expected other tasks' tests to reach {n_tokens} tokens, got {len(ids)}",
            sample=task_id,
            field="other_tests",
        )
    # Decoding a cut and tokenising it again can merge tokens across the cut (runs of
    # spaces): take a few more ids until the text itself has the target count.
    best = tokenizer.decode(ids[:n_tokens])
    for k in range(n_tokens, min(len(ids), n_tokens + 16) + 1):
        text = tokenizer.decode(ids[:k])
        count = token_count(tokenizer, text)
        if abs(count - n_tokens) < abs(token_count(tokenizer, best) - n_tokens):
            best = text
        if count >= n_tokens:
            break
    return best, used


def _user_index(messages: Sequence[dict]) -> int:
    return next(i for i, m in enumerate(messages) if m["role"] == "user")


def _replace_tool_content(record: dict, content: str) -> None:
    """Swap the tool response's content in ``record['conditions']['agentic']`` in place."""
    agentic = record["conditions"]["agentic"]
    seg = agentic["segments"][TOOL]
    message = agentic["messages"][seg["message_index"]]
    start, end = seg["char_span"]
    message["content"] = message["content"][:start] + content + message["content"][end:]
    if content:
        seg["char_span"] = [start, start + len(content)]
    else:
        del agentic["segments"][TOOL]


def task_conditions(
    problems: Mapping[str, CodeProblem],
    task_ids: Sequence[str],
    tokenizer: Any,
    *,
    variants: Sequence[str] = VARIANTS,
    tool_role: str = "user",
    seed: int = 0,
) -> dict[str, dict[str, LensSample]]:
    """``{task_id: {variant: LensSample}}``; each sample contrasts ``agentic`` with
    ``assisted`` on the canonical solution, ``group`` unset (the quadrant comes later)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or "tests" not in variants:
        raise InputError(
            f"expected variants among {', '.join(VARIANTS)} including 'tests', got "
            f"{', '.join(variants)}",
            field="variants",
        )
    chosen = {t: problems[t] for t in task_ids}
    base = build_humaneval_samples(chosen, tool_role=tool_role, tool_content="tests", seed=seed)
    out: dict[str, dict[str, LensSample]] = {}
    for record in base:
        tid = record["id"]
        p = problems[tid]
        for cond in record["conditions"].values():
            cond.setdefault("segments", {})[TASK] = {"message_index": _user_index(cond["messages"])}
        per: dict[str, LensSample] = {}
        for variant in variants:
            rec = copy.deepcopy(record)
            meta = rec["metadata"]
            meta["tool_content"] = variant
            if variant == "spec":
                _replace_tool_content(rec, p.prompt)
            elif variant == "empty":
                _replace_tool_content(rec, "")
            elif variant == "other_tests":
                n = token_count(tokenizer, p.test)
                text, used = length_matched_tests(problems, tid, n, tokenizer, seed)
                _replace_tool_content(rec, text)
                meta["tests_from"] = used
            per[variant] = LensSample.model_validate(rec)
        out[tid] = per
    return out
