"""The contrastive pair: one interface for activation patching and RCID distillation.

A pair is a clean prompt and a minimally different corrupt prompt, the answer the clean
prompt should produce (``correct``) and the answer the corruption points to (``wrong``),
plus named key positions. Pairs are text; :func:`tokenize_pair` turns them into token ids
for one tokenizer, because single-token answers and token positions differ between
model families (a Qwen name pool is not a Llama name pool).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from mechscope.data.tokens import (
    answer_token_ids,
    char_span_to_token,
    encode,
    filter_single_token_names,
    first_token_text,
)
from mechscope.errors import InputError
from mechscope.runs.summary import SummaryRepr

Span = tuple[int, int]
Policy = Literal["first", "error"]

__all__ = [
    "ContrastivePair",
    "TokenizedPair",
    "filter_single_token_names",
    "first_token_answers",
    "tokenize_pair",
    "tokenize_pairs",
]


def _spans(raw: dict, text: str, sample: str, name: str) -> dict[str, Span]:
    out: dict[str, Span] = {}
    for key, value in raw.items():
        try:
            s, e = (int(v) for v in value)
        except (TypeError, ValueError):
            raise InputError(
                "expected a [start, end] pair of ints", sample=sample, field=f"{name}.{key}"
            ) from None
        if not 0 <= s < e <= len(text):
            raise InputError(
                f"expected 0 <= start < end <= {len(text)}, got ({s}, {e})",
                sample=sample,
                field=f"{name}.{key}",
            )
        out[str(key)] = (s, e)
    return out


@dataclass(frozen=True)
class ContrastivePair(SummaryRepr):
    """A clean/corrupt prompt pair with answers and named character spans.

    ``spans`` / ``corrupt_spans`` map a position name (``"IO"``, ``"S2"``, ``"subject"``,
    ``"end"``) to its ``[start, end)`` characters in ``clean`` / ``corrupt``; both default
    to none (only span-granularity patching and RCID's named positions need them). ``modified``
    says whether that span's text differs between the two; it is computed when omitted
    and checked when given. ``correct`` / ``wrong`` include their leading space.
    """

    id: str
    task: str
    clean: str
    corrupt: str
    correct: str
    wrong: str
    spans: dict[str, Span] = field(default_factory=dict)
    corrupt_spans: dict[str, Span] = field(default_factory=dict)
    modified: dict[str, bool] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sid = str(self.id)
        for name in ("clean", "corrupt", "correct", "wrong"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InputError("expected a non-empty string", sample=sid, field=name)
        if self.correct == self.wrong:
            raise InputError(
                f"expected 'correct' and 'wrong' to differ, both {self.correct!r}",
                sample=sid,
                field="wrong",
            )
        spans = _spans(self.spans, self.clean, sid, "spans")
        cspans = _spans(self.corrupt_spans, self.corrupt, sid, "corrupt_spans")
        if set(spans) != set(cspans):
            raise InputError(
                f"expected the same span names as 'spans' {sorted(spans)}",
                sample=sid,
                field="corrupt_spans",
            )
        computed = {
            k: self.clean[slice(*spans[k])] != self.corrupt[slice(*cspans[k])] for k in spans
        }
        for key, flag in dict(self.modified).items():
            if key not in computed or bool(flag) != computed[key]:
                raise InputError(
                    f"expected {computed.get(key)} (whether the span text differs)",
                    sample=sid,
                    field=f"modified.{key}",
                )
        object.__setattr__(self, "id", sid)
        object.__setattr__(self, "spans", spans)
        object.__setattr__(self, "corrupt_spans", cspans)
        object.__setattr__(self, "modified", computed)
        object.__setattr__(self, "metadata", dict(self.metadata))

    def span_text(self, name: str, *, corrupt: bool = False) -> str:
        """The text of span ``name`` in the clean (or corrupt) prompt."""
        text, spans = (self.corrupt, self.corrupt_spans) if corrupt else (self.clean, self.spans)
        return text[slice(*spans[name])]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (spans as lists); :meth:`from_dict` reverses it."""
        return {
            "id": self.id,
            "task": self.task,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "correct": self.correct,
            "wrong": self.wrong,
            "spans": {k: list(v) for k, v in self.spans.items()},
            "corrupt_spans": {k: list(v) for k, v in self.corrupt_spans.items()},
            "modified": dict(self.modified),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ContrastivePair:
        """A pair from :meth:`to_dict`'s record (a JSONL line); spans may be left out."""
        sid = str(record.get("id", "?"))
        for name in (
            "id",
            "task",
            "clean",
            "corrupt",
            "correct",
            "wrong",
        ):
            if name not in record:
                raise InputError("expected this field to be present", sample=sid, field=name)
        return cls(**{k: record[k] for k in record if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TokenizedPair:
    """A pair as token ids for one tokenizer.

    ``answer_pos`` is ``(clean, corrupt)``: the index of the last prompt token, whose
    logits predict the answer. ``positions[name]`` is ``(clean, corrupt)``: the index of
    the LAST token of that span (the token that has read the whole word). Indices count
    any BOS token the tokenizer adds. ``correct_id`` / ``wrong_id`` are measured after the
    clean prompt. ``warnings`` records answers truncated to their first token; ``metadata``
    is the pair's (template index, names, ...), e.g. for control labels of probes.
    """

    id: str
    task: str
    clean_ids: list[int]
    corrupt_ids: list[int]
    answer_pos: tuple[int, int]
    correct_id: int
    wrong_id: int
    positions: dict[str, tuple[int, int]]
    modified: dict[str, bool]
    same_length: bool
    warnings: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


def _answer_id(
    pair: ContrastivePair,
    tokenizer: Any,
    name: str,
    policy: Policy,
    add_special_tokens: bool,
    notes: list[str],
) -> int:
    answer = getattr(pair, name)
    ids = answer_token_ids(
        tokenizer,
        pair.clean,
        answer,
        add_special_tokens=add_special_tokens,
        sample=pair.id,
        field=name,
    )
    if len(ids) > 1:
        if policy == "error":
            raise InputError(
                f"expected {answer!r} to be a single token, got {len(ids)}",
                sample=pair.id,
                field=name,
            )
        notes.append(f"{name} {answer!r} is {len(ids)} tokens; using the first")
    return ids[0]


def tokenize_pair(
    pair: ContrastivePair,
    tokenizer: Any,
    *,
    policy: Policy = "first",
    add_special_tokens: bool = True,
) -> TokenizedPair:
    """Tokenize a pair and map its character spans to token positions.

    ``policy="error"`` raises :class:`InputError` (naming the pair and ``correct`` /
    ``wrong``) when an answer is more than one token; ``"first"`` keeps its first token and
    records a note in ``TokenizedPair.warnings``. Answers whose (first) tokens coincide
    always raise: their logit difference would be zero by construction.
    """
    if policy not in ("first", "error"):
        raise InputError(f"expected policy 'first' or 'error', got {policy!r}", field="policy")
    clean = encode(tokenizer, pair.clean, add_special_tokens=add_special_tokens, sample=pair.id)
    corrupt = encode(tokenizer, pair.corrupt, add_special_tokens=add_special_tokens, sample=pair.id)
    notes: list[str] = []
    correct_id = _answer_id(pair, tokenizer, "correct", policy, add_special_tokens, notes)
    wrong_id = _answer_id(pair, tokenizer, "wrong", policy, add_special_tokens, notes)
    if correct_id == wrong_id:
        raise InputError(
            f"expected different first tokens for {pair.correct!r} and {pair.wrong!r}",
            sample=pair.id,
            field="wrong",
        )
    positions = {
        name: (
            char_span_to_token(clean, pair.spans[name], sample=pair.id, field=f"spans.{name}"),
            char_span_to_token(
                corrupt, pair.corrupt_spans[name], sample=pair.id, field=f"corrupt_spans.{name}"
            ),
        )
        for name in pair.spans
    }
    return TokenizedPair(
        id=pair.id,
        task=pair.task,
        clean_ids=clean.ids,
        corrupt_ids=corrupt.ids,
        answer_pos=(len(clean.ids) - 1, len(corrupt.ids) - 1),
        correct_id=correct_id,
        wrong_id=wrong_id,
        positions=positions,
        modified=dict(pair.modified),
        same_length=len(clean.ids) == len(corrupt.ids),
        warnings=tuple(notes),
        metadata=dict(pair.metadata),
    )


def tokenize_pairs(
    pairs: list[ContrastivePair],
    tokenizer: Any,
    *,
    policy: Policy = "first",
    add_special_tokens: bool = True,
) -> list[TokenizedPair]:
    """:func:`tokenize_pair` over a list (errors name the failing pair)."""
    return [
        tokenize_pair(p, tokenizer, policy=policy, add_special_tokens=add_special_tokens)
        for p in pairs
    ]


def first_token_answers(
    pairs: list[ContrastivePair], tokenizer: Any, *, add_special_tokens: bool = True
) -> tuple[list[ContrastivePair], list[str]]:
    """Reduce each pair's answers to the text of their first token; drop pairs where they tie.

    Facts and WinoGrande answers are often several tokens (``" Antarctica"``). The usual
    metric compares first tokens, so the answer becomes e.g. ``" Ant"`` (which tokenizes to
    exactly that token) and the full answer moves to ``metadata``. Returns the kept pairs
    and the ids of dropped ones (first tokens equal, or not separable from the prompt).
    """
    kept: list[ContrastivePair] = []
    dropped: list[str] = []
    for pair in pairs:
        try:
            c_text, c_id = first_token_text(
                tokenizer,
                pair.clean,
                pair.correct,
                add_special_tokens=add_special_tokens,
                sample=pair.id,
                field="correct",
            )
            w_text, w_id = first_token_text(
                tokenizer,
                pair.clean,
                pair.wrong,
                add_special_tokens=add_special_tokens,
                sample=pair.id,
                field="wrong",
            )
        except InputError:
            dropped.append(pair.id)
            continue
        if c_id == w_id:
            dropped.append(pair.id)
            continue
        meta = {**pair.metadata, "full_correct": pair.correct, "full_wrong": pair.wrong}
        kept.append(replace(pair, correct=c_text, wrong=w_text, metadata=meta))
    return kept, dropped
