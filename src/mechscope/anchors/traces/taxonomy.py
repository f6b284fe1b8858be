"""The eight sentence functions of the Thought Anchors taxonomy, and a rule-based labeler.

Every labeler answers ``label(chunks, problem) -> list[Label]`` (one label per chunk).
:class:`RuleLabeler` is the transparent default: ordered regular-expression rules, the
first rule that matches wins (``RULES`` below, in priority order):

1. chunk 0 is ``problem_setup`` (a trace opens by restating the problem);
2. ``final_answer_emission``: "**Final Answer**", ``\\boxed{``, "the answer is …";
3. ``uncertainty_management``: opens with wait/hmm/hold on/actually, or mentions
   confusion, a mistake, reconsidering; or is a question;
4. ``self_checking``: "let me check/verify/confirm", "that seems right", "that works",
   an opening yes/correct, a check mark;
5. ``problem_setup``: "I have this problem", "the problem says/asks", "I need to find";
6. ``plan_generation``: "first/next/alternatively, let me …", "let me try/use/compute …",
   approach / strategy / method / step by step;
7. ``fact_retrieval``: recall / remember / formula / theorem / definition, "since …",
   "given …", "we know …";
8. ``active_computation``: arithmetic between numbers or symbols, or an opening
   compute/calculate/solve verb;
9. ``result_consolidation``: opens with so/therefore/thus/hence/that means, or
   in total / in summary / combining;
10. ``active_computation``: any remaining digit or operator;
11. otherwise ``plan_generation``.

On the 40 published traces (5,814 chunks, one gold tag each) it agrees with the
published labels on 53.0 % of chunks; always answering the most frequent tag
(active_computation) agrees on 37.3 %.

Dependencies (``depends_on``) are a simple heuristic: the latest earlier chunk that shares
a number of two or more digits (or a one-letter variable in an equation); computation,
consolidation, checking and answer chunks with no such link depend on the previous chunk.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

CATEGORIES: tuple[str, ...] = (
    "problem_setup",
    "plan_generation",
    "fact_retrieval",
    "active_computation",
    "uncertainty_management",
    "result_consolidation",
    "self_checking",
    "final_answer_emission",
)


class Label(BaseModel):
    """The function(s) of one chunk and the earlier chunks it builds on."""

    tags: list[str] = Field(min_length=1)
    depends_on: list[int] = Field(default_factory=list)

    @field_validator("tags")
    @classmethod
    def _known_tags(cls, tags: list[str]) -> list[str]:
        unknown = [t for t in tags if t not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; expected some of {CATEGORIES}")
        return tags


@runtime_checkable
class Labeler(Protocol):
    """Labels every chunk of a trace."""

    def label(self, chunks: Sequence[str], problem: str) -> list[Label]: ...


def _compile(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


_DO = (
    r"try|use|start|consider|think|figure|approach|break|go|compute|calculate|find|set|write|"
    r"solve|express|denote|look|see|recall|convert|apply|plug|substitute|expand|simplify|list|count"
)
RULES: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = (
    (
        "final_answer_emission",
        _compile(
            [
                r"\*\*final answer\*\*",
                r"\\boxed\{",
                r"\b(the )?(final |correct )?answer (is|should be|would be)\b",
                r"^(so|therefore|thus|hence),? the (final )?answer",
            ]
        ),
    ),
    (
        "uncertainty_management",
        _compile(
            [
                r"^(wait|hmm|but wait|hold on|oh|actually)\b",
                r"\b(confus|mistake|made an error|not sure|unsure|doesn't make sense|"
                r"can't be right|that can't|contradict|overcomplicat|re-?evaluate|reconsider|"
                r"maybe i)\b",
                r"\?$",
            ]
        ),
    ),
    (
        "self_checking",
        _compile(
            [
                r"\b(let me|let's|i should|i'll|i will|to) (double[- ]?check|check|verify|confirm|"
                r"recheck|re-check|make sure)",
                r"\b(that|this|it) (seems|looks|is) (right|correct|consistent)",
                r"\b(that|this) (checks out|works|matches)\b",
                r"^(yes|correct|right|okay|ok)[,.!]",
                r"✔|✓",
            ]
        ),
    ),
    (
        "problem_setup",
        _compile(
            [
                r"^(okay|ok|alright|so),? (so )?(i|we)('ve| have)? (got |have )?"
                r"(this|a|the) problem",
                r"\bthe problem (says|states|is asking|asks|gives)\b",
                r"\b(i|we) need to (find|determine|figure out|compute|calculate) ",
            ]
        ),
    ),
    (
        "plan_generation",
        _compile(
            [
                r"^(first|next|then|now|alternatively|maybe|perhaps),? (i|we|let)",
                rf"\b(let me|let's|i'll|i will|i should|i can|we can|i need to|"
                rf"i think i should) ({_DO})",
                r"\b(approach|strategy|plan|method|step by step|another way)\b",
            ]
        ),
    ),
    (
        "fact_retrieval",
        _compile(
            [
                r"\b(recall|remember|formula|theorem|by definition|is defined|known|property|"
                r"identity|rule)\b",
                r"^(since|given|we know|i know)\b",
                r"\b(has|have|is) (a|an) (perimeter|area|side|radius)",
            ]
        ),
    ),
    (
        "active_computation",
        _compile(
            [
                r"\d\s*[-+*/×÷^]\s*\(?\d",
                r"[a-z0-9)]\s*[-+*/^]\s*[a-z0-9(\\]",
                r"^(compute|calculate|multiply|divide|subtract|add|expand|simplify|solve)",
            ]
        ),
    ),
    (
        "result_consolidation",
        _compile(
            [
                r"^(so|therefore|thus|hence|that means|this means|which means)\b",
                r"\b(in total|altogether|in summary|overall|combining)\b",
            ]
        ),
    ),
    ("active_computation", _compile([r"[=+\-*/×÷^]", r"\d"])),
)
FALLBACK = "plan_generation"

_NUMBER = re.compile(r"\d{2,}(?:\.\d+)?")
_VARIABLE = re.compile(r"(?<![A-Za-z\\])([a-zA-Z])\s*=")
_LINKED = {"active_computation", "result_consolidation", "self_checking", "final_answer_emission"}


def rule_tag(chunk: str, index: int) -> str:
    """The category of one chunk under ``RULES`` (first match wins)."""
    if index == 0:
        return "problem_setup"
    text = chunk.strip()
    for tag, patterns in RULES:
        if any(p.search(text) for p in patterns):
            return tag
    return FALLBACK


def _tokens(chunk: str) -> set[str]:
    return set(_NUMBER.findall(chunk)) | set(_VARIABLE.findall(chunk))


def rule_dependencies(chunks: Sequence[str], index: int, tag: str) -> list[int]:
    """Earlier chunks this one builds on, by shared numbers/variables (see module doc)."""
    if index == 0 or tag == "problem_setup":
        return []
    mine = _tokens(chunks[index])
    for j in range(index - 1, -1, -1):
        if mine & _tokens(chunks[j]):
            return [j]
    return [index - 1] if tag in _LINKED else []


class RuleLabeler:
    """Transparent regex labeler (see the module docstring for the rules)."""

    def label(self, chunks: Sequence[str], problem: str = "") -> list[Label]:
        out = []
        for i, chunk in enumerate(chunks):
            tag = rule_tag(chunk, i)
            out.append(Label(tags=[tag], depends_on=rule_dependencies(chunks, i, tag)))
        return out
