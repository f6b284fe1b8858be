"""Preparing multimodal pairs (:mod:`mechscope.patching.modal_pairs`) for a sweep.

Both prompts go through the model's processor; the span is named after the modality
(``audio`` / ``image``) and found after the placeholder is expanded. Spans of different
lengths follow the spec's ``span_policy``. The prepared pair carries each prompt's encoder
inputs and a key of its media, since two clips under the same text have the same ids.
With ``candidates`` the readout is K-way, so ``flip_to_target`` asks whether the arg-max
over the candidates became the target, as in the seed's audio-span patching.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mechscope.data.modal_prompt import (
    ModalPrompt,
    cast_inputs,
    encode_modal,
    load_media,
    pad_media,
    render_prompt,
)
from mechscope.data.pairs import TokenizedPair
from mechscope.data.tokens import answer_token_ids
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import Direction, PatchSpec
from mechscope.patching.modal_pairs import ModalPair, ModalSide
from mechscope.patching.prepare import PreparedPair, check_grid, truncate_ranges


def _encode(lm: LoadedModel, side: ModalSide, media: Any, pid: str) -> ModalPrompt:
    text = render_prompt(side.prompt, lm.processor, side.kind, sample=pid)
    return encode_modal(lm.processor, lm.model.config, text, side.kind, media, sample=pid)


def encode_pair(
    lm: LoadedModel, pair: ModalPair, spec: PatchSpec
) -> tuple[ModalPrompt, ModalPrompt]:
    """(base, source) through the processor; with the ``pad`` policy each medium is first
    padded to the other's size, so both spans have as many tokens."""
    if lm.processor is None or lm.modality != pair.base.kind:
        has = f"an {lm.modality} model" if lm.modality else "a text model"
        raise InputError(
            f"expected a model that reads {pair.base.kind}, {lm.spec} is {has}",
            sample=pair.id,
            field=pair.base.kind,
        )
    media = [
        load_media(lm.processor, s.kind, Path(s.path), sample=pair.id)
        for s in (pair.base, pair.source)
    ]
    if spec.span_policy == "pad":
        media = [
            pad_media(media[0], pair.base.kind, media[1]),
            pad_media(media[1], pair.base.kind, media[0]),
        ]
    return _encode(lm, pair.base, media[0], pair.id), _encode(lm, pair.source, media[1], pair.id)


def _answer(lm: LoadedModel, text: str, word: str, spec: PatchSpec, pid: str, key: str) -> int:
    ids = answer_token_ids(lm.tokenizer, text, word, sample=pid, field=key)
    if len(ids) > 1 and spec.policy == "error":
        raise InputError(
            f"expected {word!r} to be a single token, got {len(ids)} (policy 'first' keeps the "
            "first)",
            sample=pid,
            field=key,
        )
    return ids[0]


def prepare_modal_pair(
    lm: LoadedModel, pair: ModalPair, direction: Direction, spec: PatchSpec
) -> PreparedPair:
    """The token-level description of one direction, checked before any forward."""
    if spec.attribution:
        raise UnsupportedInterventionError(
            "attribution patching of multimodal pairs is not supported (its gradient pass does "
            "not take encoder inputs): run the exact sweep (--no-attribution)"
        )
    base, source = encode_pair(lm, pair, spec)
    kind = pair.base.kind
    text = render_prompt(pair.source.prompt, lm.processor, kind, sample=pair.id)
    correct = _answer(lm, text, pair.target, spec, pair.id, "target")
    wrong = _answer(lm, text, pair.wrong, spec, pair.id, "wrong")
    if correct == wrong:
        raise InputError(
            f"expected different first tokens for {pair.target!r} and {pair.wrong!r}",
            sample=pair.id,
            field="wrong",
        )
    cands = None
    if pair.candidates or spec.candidates:
        cands = tuple(
            _answer(lm, text, w, spec, pair.id, "candidates")
            for w in (pair.candidates or spec.candidates or ())
        )
        if len(set(cands)) != len(cands) or correct not in cands or wrong not in cands:
            raise InputError(
                "expected distinct candidates that contain 'target' and 'wrong'",
                sample=pair.id,
                field="candidates",
            )
    spans = {kind: (base.span, source.span)}
    if spec.span_policy == "truncate":
        spans = {kind: truncate_ranges(base.span, source.span)}
    keys = (f"{pair.base.digest}:{spec.span_policy}", f"{pair.source.digest}:{spec.span_policy}")
    if spec.span_policy == "pad":  # padded media depend on the other side too
        keys = (f"{keys[0]}:{pair.source.digest}", f"{keys[1]}:{pair.base.digest}")
    if direction == "noising":
        base, source, keys = source, base, (keys[1], keys[0])
        spans = {k: (s, b) for k, (b, s) in spans.items()}
    prepared = PreparedPair(
        id=pair.id,
        direction=direction,
        base_ids=base.ids,
        source_ids=source.ids,
        correct_id=correct,
        wrong_id=wrong,
        target_id=correct if direction == "denoising" else wrong,
        spans=spans,
        base_tokens=[str(t) for t in lm.tokenizer.convert_ids_to_tokens(base.ids)],
        candidate_ids=cands,
        base_inputs=cast_inputs(base.inputs, lm.dtype),
        source_inputs=cast_inputs(source.inputs, lm.dtype),
        base_key=keys[0],
        source_key=keys[1],
    )
    check_grid(prepared, spec)
    return prepared


def prepare_any(lm: LoadedModel, pair: Any, direction: Direction, spec: PatchSpec) -> PreparedPair:
    """:func:`prepare_modal_pair` for a :class:`ModalPair`, the pair's own ids for a
    :class:`TokenizedPair`, else the text preparation."""
    from mechscope.patching.prepare import prepare_pair
    from mechscope.patching.token_pairs import prepare_token_pair

    if isinstance(pair, ModalPair):
        return prepare_modal_pair(lm, pair, direction, spec)
    if isinstance(pair, TokenizedPair):
        return prepare_token_pair(lm, pair, direction, spec)
    return prepare_pair(pair, lm.tokenizer, direction, spec)


def prompt_length(lm: LoadedModel, pair: Any, spec: PatchSpec) -> int:
    """The longer prompt of a pair, in tokens (after the processor for a media pair)."""
    if isinstance(pair, ModalPair):
        base, source = encode_pair(lm, pair, spec)
        return max(len(base.ids), len(source.ids))
    if isinstance(pair, TokenizedPair):
        return max(len(pair.clean_ids), len(pair.corrupt_ids))
    return max(len(lm.tokenizer(t).input_ids) for t in (pair.clean, pair.corrupt))
