"""Patching pairs of multimodal samples: the audio (or image) span of B into A.

A line of a pairs file in the base/source form whose ``base`` and ``source`` are objects
(``{"prompt": "{audio} The emotion of the speaker is", "audio": "clips/a.wav"}``) is a
:class:`ModalPair`. ``target`` is the source's answer and ``wrong`` the base's, as written
(with the leading space the prompt needs); ``candidates`` (optional) makes the readout
K-way, so ``flip_to_target`` asks whether the argmax over the candidates became the target,
as in the seed's audio-span patching. The span is named after the modality (``audio`` /
``image``) and found after the processor has expanded its placeholder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechscope.data.media import MediaKind, media_field, resolve_media
from mechscope.data.modal_prompt import (
    ModalPrompt,
    cast_inputs,
    encode_modal,
    load_media,
    pad_media,
    render_prompt,
)
from mechscope.data.tokens import answer_token_ids
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.prepare import PreparedPair, check_grid, truncate_ranges
from mechscope.patching.spec import Direction, PatchSpec


@dataclass(frozen=True)
class ModalSide:
    """One prompt of a pair: text with a media marker, its file and the file's content key
    (so a resumed run recomputes a pair whose clip was replaced under the same name)."""

    prompt: str
    kind: MediaKind
    path: str
    digest: str


@dataclass(frozen=True)
class ModalPair:
    """Patch ``source``'s media span into ``base`` (denoising), or back (noising)."""

    id: str
    base: ModalSide
    source: ModalSide
    target: str
    wrong: str
    candidates: tuple[str, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def is_modal_record(record: dict[str, Any]) -> bool:
    return isinstance(record.get("base"), dict) or isinstance(record.get("source"), dict)


def modal_pair_from_record(record: dict[str, Any], where: str, base_dir: Path) -> ModalPair:
    """A :class:`ModalPair` from a JSONL record; the media files are checked here."""
    pid = record.get("id") if isinstance(record.get("id"), str) else where
    sides = {}
    for name in ("base", "source"):
        side = record.get(name)
        if not isinstance(side, dict):
            raise InputError(
                "expected an object with 'prompt' and 'audio' or 'image'", sample=pid, field=name
            )
        kind = media_field(side, pid)
        prompt = side.get("prompt")
        if kind is None or not isinstance(prompt, str) or not prompt:
            raise InputError(
                "expected an object with 'prompt' and 'audio' or 'image'", sample=pid, field=name
            )
        path = resolve_media(side[kind], kind, base_dir, sample=pid)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        sides[name] = ModalSide(prompt, kind, str(path), digest)
    if sides["base"].kind != sides["source"].kind:
        raise InputError(
            "expected base and source of the same modality", sample=pid, field="source"
        )
    words = {}
    for key in ("target", "wrong"):
        if not isinstance(record.get(key), str) or not record[key].strip():
            raise InputError("expected a non-empty answer word", sample=pid, field=key)
        words[key] = record[key]
    cands = record.get("candidates")
    if cands is not None and (
        not isinstance(cands, list) or len(cands) < 2 or not all(isinstance(c, str) for c in cands)
    ):
        raise InputError("expected a list of at least two words", sample=pid, field="candidates")
    return ModalPair(
        pid,
        sides["base"],
        sides["source"],
        words["target"],
        words["wrong"],
        tuple(cands) if cands is not None else None,
        dict(record.get("metadata") or {}),
    )


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
    """:func:`prepare_modal_pair` for a :class:`ModalPair`, else the text preparation."""
    from mechscope.patching.prepare import prepare_pair

    if isinstance(pair, ModalPair):
        return prepare_modal_pair(lm, pair, direction, spec)
    return prepare_pair(pair, lm.tokenizer, direction, spec)


def prompt_length(lm: LoadedModel, pair: Any, spec: PatchSpec) -> int:
    """The longer prompt of a pair, in tokens (after the processor for a media pair)."""
    if isinstance(pair, ModalPair):
        base, source = encode_pair(lm, pair, spec)
        return max(len(base.ids), len(source.ids))
    return max(len(lm.tokenizer(t).input_ids) for t in (pair.clean, pair.corrupt))
