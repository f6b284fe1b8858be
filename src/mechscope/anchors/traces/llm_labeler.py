"""Label chunks with any local chat model, validating its JSON and falling back to rules.

``chat(messages) -> str`` takes OpenAI-style messages (``[{"role", "content"}]``); any
local model wrapped that way works. The reply must hold one JSON object mapping chunk
indices to ``{"function_tags": [...], "depends_on": [...]}``. Each chunk's entry is
validated (known categories, dependencies on earlier chunks only); a chunk whose entry
is missing or invalid, or every chunk of an unparsable reply, gets the fallback
labeler's label instead, and the labeler counts how often that happened
(``n_fallback_chunks``, ``n_invalid_replies``) so a weak model cannot go unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from mechscope.anchors.traces.taxonomy import CATEGORIES, Label, Labeler, RuleLabeler

ChatFn = Callable[[list[dict[str, str]]], str]

DESCRIPTIONS = {
    "problem_setup": "parsing or rephrasing the problem",
    "plan_generation": "stating or deciding on a plan of action, meta-reasoning",
    "fact_retrieval": "recalling facts, formulas, problem details without computation",
    "active_computation": "algebra, calculations, or other manipulations toward the answer",
    "uncertainty_management": "expressing confusion, re-evaluating, including backtracking",
    "result_consolidation": "aggregating intermediate results, summarizing, or preparing",
    "self_checking": "verifying previous steps, checking calculations, re-confirmations",
    "final_answer_emission": "explicitly stating the final answer",
}

SYSTEM_PROMPT = (
    "You label the sentences (chunks) of a model's reasoning about a math problem.\n"
    "Categories:\n"
    + "\n".join(f"- {name}: {text}" for name, text in DESCRIPTIONS.items())
    + "\nFor every chunk give one or more categories and the indices of EARLIER chunks it "
    "directly uses (depends_on). Reply with ONE JSON object and nothing else, e.g. "
    '{"0": {"function_tags": ["problem_setup"], "depends_on": []}, '
    '"1": {"function_tags": ["active_computation"], "depends_on": [0]}}'
)


class _ChunkReply(BaseModel):
    function_tags: list[str]
    depends_on: list[int] = []


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first balanced ``{…}`` in ``text`` that parses as a JSON object, else None."""
    start = text.find("{")
    while start >= 0:
        depth, in_string, escaped = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
                continue
            if ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        value = json.loads(text[start : i + 1])
                    except json.JSONDecodeError:
                        break
                    return value if isinstance(value, dict) else None
        start = text.find("{", start + 1)
    return None


def validate_entry(entry: Any, index: int) -> Label | None:
    """A valid label for chunk ``index`` from one reply entry, or None."""
    try:
        reply = _ChunkReply.model_validate(entry)
        if not all(0 <= d < index for d in reply.depends_on):
            return None
        tags = [t.strip().lower().replace(" ", "_") for t in reply.function_tags]
        return Label(tags=tags, depends_on=sorted(set(reply.depends_on)))
    except (ValidationError, TypeError, ValueError):
        return None


class LLMLabeler:
    """Labels chunks with ``chat``; invalid output falls back to ``fallback`` (rules)."""

    def __init__(self, chat: ChatFn, fallback: Labeler | None = None, chunks_per_call: int = 50):
        self.chat = chat
        self.fallback = fallback or RuleLabeler()
        self.chunks_per_call = max(1, chunks_per_call)
        self.n_invalid_replies = 0
        self.n_fallback_chunks = 0
        self.n_chunks = 0

    def _messages(self, chunks: Sequence[str], start: int, problem: str) -> list[dict[str, str]]:
        listing = "\n\n".join(
            f"Chunk {start + k}:\n{c}"
            for k, c in enumerate(chunks[start : start + self.chunks_per_call])
        )
        user = f"Problem:\n{problem}\n\nChunks:\n{listing}\n\nReturn the JSON object."
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def label(self, chunks: Sequence[str], problem: str) -> list[Label]:
        if not chunks:
            return []
        rules = self.fallback.label(chunks, problem)
        out: list[Label] = []
        for start in range(0, len(chunks), self.chunks_per_call):
            reply = first_json_object(self.chat(self._messages(chunks, start, problem)) or "")
            if reply is None:
                self.n_invalid_replies += 1
            stop = min(start + self.chunks_per_call, len(chunks))
            for i in range(start, stop):
                label = validate_entry(reply.get(str(i)), i) if reply is not None else None
                if label is None:
                    self.n_fallback_chunks += 1
                    label = rules[i]
                out.append(label)
        self.n_chunks += len(chunks)
        return out


__all__ = ["CATEGORIES", "DESCRIPTIONS", "LLMLabeler", "first_json_object", "validate_entry"]
