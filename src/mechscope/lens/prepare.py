"""Turn a sample into token ids for its two contrasted conditions, checking everything first.

The continuation is tokenised ONCE and appended to each condition's prefix ids, so both
conditions score exactly the same target tokens. ``cont_start`` (the index of the first
continuation token) is checked against the offsets mapping: every prefix token must end
inside the prefix text and the token at ``cont_start`` must start at the continuation's
first character. All checks run for every sample before any model work or any file is
written, so a bad line fails the run at once and leaves nothing half-written.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechscope.data.tokens import Encoding, encode
from mechscope.errors import InputError
from mechscope.lens.samples import LensSample, Span, render_prefix


@dataclass(frozen=True)
class TokenizedCondition:
    """One condition of one sample: prefix + continuation ids and segment token sets."""

    name: str
    text: str  # prefix text as tokenised
    ids: list[int]  # prefix ids then continuation ids
    cont_start: int  # index of the first continuation token in ``ids``
    segments: dict[str, np.ndarray]  # segment -> prefix token indices (sorted, disjoint)

    @property
    def length(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class PreparedSample:
    """A sample ready for the forward passes of its contrast ``(a, b)``."""

    sample: LensSample
    contrast: tuple[str, str]
    cont_ids: list[int]
    cont_offsets: list[Span]  # character span of each continuation token
    cont_texts: list[str]  # text of each continuation token (from its offsets)
    conditions: dict[str, TokenizedCondition]
    joint_tokenization_matches: bool  # prefix+continuation tokenised together gives the same ids

    @property
    def id(self) -> str:
        return self.sample.id

    @property
    def n_tokens(self) -> int:
        return len(self.cont_ids)


def prepare_sample(
    sample: LensSample,
    tokenizer: Any,
    contrast: tuple[str, str],
    *,
    max_context: int | None,
) -> PreparedSample:
    """Render, tokenise and check one sample (see module docstring)."""
    for name in contrast:
        if name not in sample.conditions:
            have = ", ".join(sorted(sample.conditions)) or "none"
            raise InputError(
                f"expected a condition named {name!r} for the contrast (have: {have})",
                sample=sample.id,
                field="conditions",
            )
    if contrast[0] == contrast[1]:
        raise InputError(
            "expected two different conditions in the contrast", sample=sample.id, field="contrast"
        )
    if not sample.continuation.strip():
        raise InputError(
            "expected a non-empty continuation", sample=sample.id, field="continuation"
        )
    cont = encode(tokenizer, sample.continuation, add_special_tokens=False, sample=sample.id)
    cont_texts = [
        sample.continuation[a:b] if b > a else tokenizer.decode([i])
        for i, (a, b) in zip(cont.ids, cont.offsets, strict=True)
    ]
    conditions: dict[str, TokenizedCondition] = {}
    joint_ok = True
    for name in contrast:
        cond, same = _tokenize_condition(sample, name, tokenizer, cont)
        conditions[name] = cond
        joint_ok = joint_ok and same
    lengths = [c.length for c in conditions.values()]
    needed = max(lengths)  # also the length of a left-padded, position-matched condition
    if max_context is not None and needed > max_context:
        detail = ", ".join(f"{n}: {c.cont_start} + {len(cont.ids)}" for n, c in conditions.items())
        raise InputError(
            f"expected at most {max_context} tokens (the model's context), got "
            f"{needed} (prefix + continuation: {detail})",
            sample=sample.id,
            field="continuation",
        )
    return PreparedSample(
        sample, contrast, cont.ids, cont.offsets, cont_texts, conditions, joint_ok
    )


def prepare_samples(
    samples: Sequence[LensSample],
    tokenizer: Any,
    contrast: tuple[str, str],
    *,
    max_context: int | None,
) -> list[PreparedSample]:
    """:func:`prepare_sample` for all samples (unique ids), warning once about boundary merges."""
    seen: set[str] = set()
    out = []
    for s in samples:
        if s.id in seen:
            raise InputError("expected a unique sample id", sample=s.id, field="id")
        seen.add(s.id)
        out.append(prepare_sample(s, tokenizer, contrast, max_context=max_context))
    merged = [p.id for p in out if not p.joint_tokenization_matches]
    if merged:
        shown = ", ".join(merged[:5]) + (" …" if len(merged) > 5 else "")
        warnings.warn(
            f"{len(merged)} sample(s) would tokenise differently at the prefix/"
            f"continuation boundary if tokenised as one text ({shown}); the "
            "continuation is tokenised on its own and appended, identically in "
            "both conditions",
            UserWarning,
            stacklevel=2,
        )
    return out


def _tokenize_condition(
    sample: LensSample, name: str, tokenizer: Any, cont: Encoding
) -> tuple[TokenizedCondition, bool]:
    text, char_spans = render_prefix(sample, name, tokenizer)
    chat = sample.conditions[name].messages is not None
    field = f"conditions.{name}"
    prefix = encode(tokenizer, text, add_special_tokens=not chat, sample=sample.id)
    cont_start = len(prefix.ids)
    offsets = list(prefix.offsets) + [(a + len(text), b + len(text)) for a, b in cont.offsets]
    specials = list(prefix.special) + list(cont.special)
    before_ok = all(specials[i] or offsets[i][1] <= len(text) for i in range(cont_start))
    if not before_ok or offsets[cont_start][0] < len(text):
        raise InputError(
            f"expected the continuation to start a new token at character "
            f"{len(text)} (cont_start {cont_start} disagrees with the offsets)",
            sample=sample.id,
            field=field,
        )
    segments = assign_segments(prefix, char_spans, sample.id, field)
    joint = encode(
        tokenizer, text + sample.continuation, add_special_tokens=not chat, sample=sample.id
    )
    ids = prefix.ids + cont.ids
    return TokenizedCondition(name, text, ids, cont_start, segments), joint.ids == ids


def assign_segments(
    enc: Encoding, spans: dict[str, Span], sample: str, field: str
) -> dict[str, np.ndarray]:
    """Token indices of each character span; a token touching two spans goes to the one it
    overlaps most (first named on ties), so segments are disjoint and masses add up."""
    owner = np.full(len(enc.ids), -1, dtype=np.int64)
    best = np.zeros(len(enc.ids), dtype=np.int64)
    names = list(spans)
    for k, seg in enumerate(names):
        s, e = spans[seg]
        for i, (a, b) in enumerate(enc.offsets):
            overlap = min(b, e) - max(a, s)
            if b > a and overlap > best[i]:
                owner[i], best[i] = k, overlap
    out: dict[str, np.ndarray] = {}
    for k, seg in enumerate(names):
        idx = np.flatnonzero(owner == k)
        if idx.size == 0:
            raise InputError(
                f"expected segment {seg!r} (characters {spans[seg]}) to cover at least one token",
                sample=sample,
                field=f"{field}.segments.{seg}",
            )
        out[seg] = idx
    return out
