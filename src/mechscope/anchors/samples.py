"""The anchors inputs: traces and problems to reason about, and the base trace of each.

Inputs (JSON list or JSONL) are either *traces* — ``text`` (prompt + reasoning as the model
wrote it, or ``full_cot``) and ``gold`` (or ``gt_answer``) — or *problems* — ``question``
(or ``problem``) and ``gold`` (or ``answer``; a GSM8K ``#### N`` answer is read to ``N``).
A problem becomes a trace by greedy generation from :func:`reasoning_prompt`: a system
instruction, one worked example as an earlier chat turn, the question, then ``<think>``
opens the model's own reasoning. The example writes its reasoning between ``<thinking>``
tags: the chunker cuts the text after the *first* ``<think>``, so the example must not
contain one. A model that imitates the example and closes with ``</thinking>`` gets that
tag written back as ``</think>`` (:func:`close_reasoning`), which ends the reasoning for the
chunker; the trace is cut after the line of its first boxed answer.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from mechscope.anchors.resampling.sampler import Sampler
from mechscope.anchors.traces.trace import Trace
from mechscope.data.loaders import check_text, read_text
from mechscope.data.math import MathProblem
from mechscope.data.math_answers import extract_gsm8k
from mechscope.errors import InputError

THINK = "<think>\n"
EXAMPLE_OPEN, EXAMPLE_CLOSE = "<thinking>\n", "\n</thinking>"
_BOXED = re.compile(r"\\boxed\s*\{")
SYSTEM = (
    "You are a careful math tutor. Think step by step in short sentences, then give the "
    "final answer as \\boxed{N}."
)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSON list (or ``{"problems": [...]}``) or of a JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"an existing JSON or JSONL file, got {path}", field="input")
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        data = data.get("problems", data.get("traces", [data]))
    if isinstance(data, list):
        records = data
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"valid JSON ({exc.msg})", sample=f"line {lineno}") from exc
    if not records or not all(isinstance(r, dict) for r in records):
        raise InputError("a non-empty list of JSON objects", field="input")
    for i, record in enumerate(records):
        check_text(record, f"{path.name} record {i}")
    return records


def _first(record: dict[str, Any], names: tuple[str, ...]) -> Any:
    return next((record[n] for n in names if record.get(n) not in (None, "")), None)


def parse_inputs(records: list[dict[str, Any]]) -> tuple[list[Trace], list[MathProblem]]:
    """Split records into traces (with ``text``) and problems (with a question)."""
    traces, problems, seen = [], [], set()
    for k, rec in enumerate(records):
        rid = str(rec.get("id", f"item-{k}"))
        if rid in seen:
            raise InputError("unique ids", sample=rid, field="id")
        seen.add(rid)
        gold = _first(rec, ("gold", "gt_answer", "answer"))
        if isinstance(gold, str) and "####" in gold:
            gold = extract_gsm8k(gold)
        if gold is None or not str(gold).strip():
            raise InputError("a gold answer (field gold, gt_answer or answer)", sample=rid)
        text = _first(rec, ("text", "full_cot"))
        if text is not None:
            traces.append(Trace.from_text(rid, str(text), str(gold)))
            continue
        question = _first(rec, ("question", "problem"))
        if not isinstance(question, str):
            raise InputError("a trace text or a question", sample=rid, field="question")
        problems.append(MathProblem(rid, question.strip(), "", str(gold).strip()))
    return traces, problems


def load_inputs(path: str | Path) -> tuple[list[Trace], list[MathProblem]]:
    """Traces and problems from a JSON/JSONL file (see the module docstring)."""
    return parse_inputs(read_records(path))


def _asset() -> dict[str, Any]:
    ref = resources.files("mechscope.anchors").joinpath("assets/easy_problems.json")
    return json.loads(ref.read_text(encoding="utf-8"))


def demo_problems() -> list[MathProblem]:
    """The shipped easy word problems (GSM8K style, two steps each) with gold answers."""
    return [MathProblem(p["id"], p["question"], "", p["gold"]) for p in _asset()["problems"]]


def reasoning_prompt(tokenizer, question: str) -> str:
    """System instruction, one worked example turn, the question, then ``<think>`` + newline."""
    ex = _asset()["example"]
    answer = f"{EXAMPLE_OPEN}{ex['reasoning']}{EXAMPLE_CLOSE}\n\nThe final answer is "
    answer += f"\\boxed{{{ex['gold']}}}."
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ex["question"]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": question},
    ]
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        prompt = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return prompt + THINK


def close_reasoning(text: str) -> str:
    """The model's ``</thinking>`` (imitating the example) written back as ``</think>``."""
    return text.replace(EXAMPLE_CLOSE.strip(), "</think>", 1)


def cut_after_answer(text: str) -> str:
    """``text`` up to the end of the line holding its first non-empty ``\\boxed{…}``.

    Small models often go on after answering (a new made-up problem); the trace is the
    reasoning that led to the answer. Text without a boxed answer is kept whole.
    """
    for match in _BOXED.finditer(text):
        depth = 0
        for i in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                if text[match.end() : i].strip():
                    line_end = text.find("\n", i)
                    return text if line_end < 0 else text[:line_end]
                break
    return text


def generate_traces(
    sampler: Sampler, tokenizer, problems: list[MathProblem], *, max_new_tokens: int = 200
) -> list[Trace]:
    """Greedy reasoning for every problem, as traces (InputError if one has no chunk)."""
    prompts = [reasoning_prompt(tokenizer, p.problem) for p in problems]
    texts = sampler.generate(
        prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0
    )
    return [
        Trace.from_text(p.id, prompt + close_reasoning(cut_after_answer(out[0])), p.answer)
        for p, prompt, out in zip(problems, prompts, texts, strict=True)
    ]
