"""Pairs given as token ids: patched as they are, with no tokenizer in between.

A researcher who already holds ids (a corpus tokenized once, random-token controls, prompts
built id by id) hands over :class:`~mechscope.data.pairs.TokenizedPair` objects instead of
text. Nothing is re-encoded, so the ids are exactly the ones patched. Spans name character
ranges of a text and candidate sets are words, so a pair of ids is patched by position
only; each prompt's readout is its last token.
"""

from __future__ import annotations

from mechscope.data.pairs import TokenizedPair
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import Direction, PatchSpec
from mechscope.patching.prepare import PreparedPair, check_grid


def check_token_pair(lm: LoadedModel, pair: TokenizedPair, spec: PatchSpec) -> None:
    """One :class:`InputError` line naming the pair and field that cannot be patched."""
    if spec.granularity != "position":
        raise InputError(
            f"expected granularity 'position' for a pair of token ids, got "
            f"{spec.granularity!r} (spans need the pair's text)",
            sample=pair.id,
            field="granularity",
        )
    if spec.candidates or pair.metadata.get("candidates"):
        raise InputError(
            "expected no candidate words for a pair of token ids",
            sample=pair.id,
            field="candidates",
        )
    for name in ("clean_ids", "corrupt_ids"):
        ids = getattr(pair, name)
        if not ids:
            raise InputError("expected at least one token id", sample=pair.id, field=name)
        bad = [i for i in ids if not 0 <= int(i) < lm.vocab_size]
        if bad:
            raise InputError(
                f"expected ids in [0, {lm.vocab_size}), got {bad[0]}", sample=pair.id, field=name
            )
    last = (len(pair.clean_ids) - 1, len(pair.corrupt_ids) - 1)
    if tuple(pair.answer_pos) != last:
        raise InputError(
            f"expected the answer position to be each prompt's last token {last}, got "
            f"{tuple(pair.answer_pos)}",
            sample=pair.id,
            field="answer_pos",
        )
    for name in ("correct_id", "wrong_id"):
        if not 0 <= int(getattr(pair, name)) < lm.vocab_size:
            raise InputError(f"expected an id in [0, {lm.vocab_size})", sample=pair.id, field=name)


def prepare_token_pair(
    lm: LoadedModel, pair: TokenizedPair, direction: Direction, spec: PatchSpec
) -> PreparedPair:
    """A :class:`PreparedPair` from the pair's own ids (checked first)."""
    check_token_pair(lm, pair, spec)
    clean, corrupt = [int(i) for i in pair.clean_ids], [int(i) for i in pair.corrupt_ids]
    if direction == "denoising":
        base, source, target = corrupt, clean, int(pair.correct_id)
    else:
        base, source, target = clean, corrupt, int(pair.wrong_id)
    prepared = PreparedPair(
        id=pair.id,
        direction=direction,
        base_ids=base,
        source_ids=source,
        correct_id=int(pair.correct_id),
        wrong_id=int(pair.wrong_id),
        target_id=target,
        spans={},
        base_tokens=[str(t) for t in lm.tokenizer.convert_ids_to_tokens(base)],
    )
    check_grid(prepared, spec)
    return prepared
