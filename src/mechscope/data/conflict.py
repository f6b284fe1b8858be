"""Emotion-conflict samples for candidate readouts (semantic content vs stated tone).

Each prompt carries one emotion in what is said and another in how it is said:
``She said, in a furious voice: "I just won the lottery!" The emotion of the speaker is``
(``semantic_label="happy"``, ``prosody_label="angry"``). A candidate logit lens restricted
to the five emotion words then shows, layer by layer, whether the model leans to the
content or to the tone cue. Samples whose two labels agree serve as controls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mechscope.data.loaders import iter_jsonl, require_str
from mechscope.data.pairs import Policy
from mechscope.data.spans import find_span
from mechscope.data.tokens import answer_token_ids
from mechscope.errors import InputError

CONFLICT_PATH = Path(__file__).parent / "assets" / "emotion_conflict.jsonl"
EMOTIONS: tuple[str, ...] = ("neutral", "happy", "sad", "angry", "surprised")


@dataclass(frozen=True)
class ConflictSample:
    """A prompt whose next token should be one of ``candidates`` (words without spaces).

    ``spans`` gives the character ranges of the quoted ``content`` and the tone ``cue``
    (empty when the file does not name them), for span patching.
    """

    id: str
    prompt: str
    candidates: tuple[str, ...]
    semantic_label: str
    prosody_label: str
    spans: dict[str, tuple[int, int]]

    @property
    def conflict(self) -> bool:
        return self.semantic_label != self.prosody_label


def _sample(rec: dict, sample: str) -> ConflictSample:
    sid = require_str(rec, "id", sample)
    prompt = require_str(rec, "prompt", sid)
    cands = rec.get("candidates")
    if (
        not isinstance(cands, list)
        or len(cands) < 2
        or not all(isinstance(c, str) and c.strip() for c in cands)
    ):
        raise InputError(
            "expected a list of at least two non-empty strings", sample=sid, field="candidates"
        )
    candidates = tuple(c.strip() for c in cands)
    if len(set(candidates)) != len(candidates):
        raise InputError("expected distinct candidates", sample=sid, field="candidates")
    labels = {}
    for name in ("semantic_label", "prosody_label"):
        labels[name] = require_str(rec, name, sid).strip()
        if labels[name] not in candidates:
            raise InputError(
                f"expected one of {list(candidates)}, got {labels[name]!r}", sample=sid, field=name
            )
    spans = {
        name: find_span(prompt, rec[name], sample=sid, field=name)
        for name in ("content", "cue")
        if rec.get(name)
    }
    return ConflictSample(
        sid, prompt, candidates, labels["semantic_label"], labels["prosody_label"], spans
    )


def load_conflict_samples(
    path: str | Path = CONFLICT_PATH, *, conflict_only: bool = False
) -> list[ConflictSample]:
    """Read conflict samples (``id``, ``prompt``, ``candidates``, ``semantic_label``,
    ``prosody_label``; optional ``content`` and ``cue``). Ids must be unique."""
    samples: list[ConflictSample] = []
    seen: set[str] = set()
    for lineno, rec in iter_jsonl(
        path, required=("id", "prompt", "candidates", "semantic_label", "prosody_label")
    ):
        s = _sample(rec, f"line {lineno}")
        if s.id in seen:
            raise InputError("expected a unique id", sample=f"line {lineno}", field="id")
        seen.add(s.id)
        if s.conflict or not conflict_only:
            samples.append(s)
    return samples


def candidate_token_ids(
    sample: ConflictSample,
    tokenizer: Any,
    *,
    policy: Policy = "first",
    add_special_tokens: bool = True,
) -> list[int]:
    """Token id of each candidate (``" " + word``) as the next token after the prompt.

    ``policy="error"`` raises when a candidate is several tokens; ``"first"`` uses its first
    token. Two candidates sharing that token always raise (the readout could not tell them
    apart).
    """
    ids = []
    for word in sample.candidates:
        toks = answer_token_ids(
            tokenizer,
            sample.prompt,
            " " + word,
            add_special_tokens=add_special_tokens,
            sample=sample.id,
            field="candidates",
        )
        if len(toks) > 1 and policy == "error":
            raise InputError(
                f"expected {word!r} to be a single token, got {len(toks)}",
                sample=sample.id,
                field="candidates",
            )
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise InputError(
            "expected candidates with distinct first tokens", sample=sample.id, field="candidates"
        )
    return ids
