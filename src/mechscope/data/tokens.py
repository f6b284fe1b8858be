"""Token-level helpers: offsets, span→token mapping, answer tokens, name filtering.

All answer checks tokenize the answer *in context* (``prompt + answer`` against
``prompt``) instead of on its own. On its own, SentencePiece tokenizers with a dummy
prefix (Llama 2, TinyStories) turn ``" Mary"`` into ``["▁", "▁M", ...]``, which is not
what the model sees after a prompt; in context the answer is exactly the tokens the
model would have to predict next.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mechscope.errors import InputError

Span = tuple[int, int]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Encoding:
    """A prompt's token ids with their character offsets (special tokens have ``(0, 0)``)."""

    ids: list[int]
    offsets: list[Span]
    special: list[bool]


def encode(
    tokenizer: Any, text: str, *, add_special_tokens: bool = True, sample: str | None = None
) -> Encoding:
    """Tokenize ``text`` with offsets; trailing special tokens (EOS/SEP) are dropped.

    Leading special tokens (BOS) are kept because the model is run with them; trailing
    ones are removed so the last token is always the last prompt token, whose output
    predicts the answer.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(
            "expected a fast tokenizer (it must return offsets)", sample=sample, field="tokenizer"
        )
    enc = tokenizer(
        text,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )
    ids = [int(i) for i in enc["input_ids"]]
    offsets = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
    special = [bool(m) for m in enc["special_tokens_mask"]]
    while special and special[-1]:
        ids.pop()
        offsets.pop()
        special.pop()
    if not ids:
        raise InputError(
            f"expected {text!r} to produce at least one token", sample=sample, field="text"
        )
    return Encoding(ids, offsets, special)


def char_span_to_token(
    enc: Encoding, span: Span, *, sample: str | None = None, field: str | None = None
) -> int:
    """Index of the LAST token overlapping the character span ``[start, end)``.

    The last token is the one that has read the whole word (causal attention), which is
    where the literature reads and patches a multi-token name or subject.
    """
    start, end = span
    best = -1
    for i, (a, b) in enumerate(enc.offsets):
        if enc.special[i] or b <= a:
            continue
        if a < end and b > start:
            best = i
    if best < 0:
        raise InputError(
            f"expected character span {span} to cover at least one token",
            sample=sample,
            field=field,
        )
    return best


def _split(
    tokenizer: Any,
    prompt: str,
    answer: str,
    add_special_tokens: bool,
    sample: str | None,
    field: str | None,
) -> tuple[Encoding, Encoding]:
    """Encodings of ``prompt`` and ``prompt + answer``, checked to share the prompt's tokens."""
    if not answer:
        raise InputError("expected a non-empty answer", sample=sample, field=field)
    p = encode(tokenizer, prompt, add_special_tokens=add_special_tokens, sample=sample)
    f = encode(tokenizer, prompt + answer, add_special_tokens=add_special_tokens, sample=sample)
    if f.ids[: len(p.ids)] != p.ids or len(f.ids) == len(p.ids):
        raise InputError(
            f"expected {answer!r} to start new tokens after the prompt; it merges "
            "with the prompt's last token",
            sample=sample,
            field=field,
        )
    return p, f


def answer_token_ids(
    tokenizer: Any,
    prompt: str,
    answer: str,
    *,
    add_special_tokens: bool = True,
    sample: str | None = None,
    field: str | None = None,
) -> list[int]:
    """Token ids the model must produce after ``prompt`` to write ``answer``.

    Raises when the answer fuses with the prompt's last token (then it is not a
    next-token prediction at all).
    """
    p, f = _split(tokenizer, prompt, answer, add_special_tokens, sample, field)
    return f.ids[len(p.ids) :]


def first_token_text(
    tokenizer: Any,
    prompt: str,
    answer: str,
    *,
    add_special_tokens: bool = True,
    sample: str | None = None,
    field: str | None = None,
) -> tuple[str, int]:
    """The prefix of ``answer`` covered by its first token after ``prompt``, and that token id.

    ``" Paris"`` may become ``(" Par", id)``. The returned text re-tokenizes to exactly that
    one token, so it can serve as a single-token answer string.
    """
    p, f = _split(tokenizer, prompt, answer, add_special_tokens, sample, field)
    first = f.ids[len(p.ids)]
    if len(f.ids) == len(p.ids) + 1:
        text = answer
    else:
        text = answer[: max(f.offsets[len(p.ids)][1] - len(prompt), 0)]
    if not text.strip():
        raise InputError(
            f"expected the first token of {answer!r} to hold more than whitespace",
            sample=sample,
            field=field,
        )
    if text != answer and answer_token_ids(
        tokenizer, prompt, text, add_special_tokens=add_special_tokens, sample=sample, field=field
    ) != [first]:
        raise InputError(
            f"expected the first token of {answer!r} to be a text prefix",
            sample=sample,
            field=field,
        )
    return text, first


# A neutral left context: a name in the IOI templates always follows a word and a space.
_NAME_CONTEXT = "When"


def is_single_token(tokenizer: Any, word: str, *, context: str = _NAME_CONTEXT) -> bool:
    """Whether ``" " + word`` is one token when it follows ``context``."""
    try:
        return len(answer_token_ids(tokenizer, context, " " + word.strip())) == 1
    except InputError:
        return False


def filter_single_token_names(names: Iterable[str], tokenizer: Any) -> tuple[list[str], list[str]]:
    """Split ``names`` into those that are one token (with a leading space) and the rest.

    Names are returned without the leading space, deduplicated, in input order. Dropped
    names are listed in one ``UserWarning`` so a user sees why a pool shrank.
    """
    kept: list[str] = []
    dropped: list[str] = []
    seen: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        (kept if is_single_token(tokenizer, name) else dropped).append(name)
    if dropped:
        label = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        warnings.warn(
            f"dropped {len(dropped)} name(s) that are not a single token under "
            f"{label!r}: {', '.join(dropped)}",
            UserWarning,
            stacklevel=2,
        )
    return kept, dropped
