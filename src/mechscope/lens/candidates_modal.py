"""Candidate readouts of multimodal samples: the prompt goes through the model's processor.

A sample of ``mechscope lens candidates`` may name an ``audio`` or ``image`` file (a path
relative to the JSONL file) and put an ``{audio}`` / ``{image}`` marker in its prompt. The
words are tokenised exactly as for a text sample (:func:`prepare_candidates`, on the prompt
with the processor's placeholder); the prompt ids are then the processor's, in which the
placeholder has become the media span, and the readout index counts those expanded
positions (``-1``: the last prompt token, as in the seed's ``readout_pos = T - 1``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mechscope.data.media import media_field, resolve_media
from mechscope.data.modal_prompt import cast_inputs, encode_modal, load_media, render_prompt
from mechscope.errors import InputError
from mechscope.lens.candidates import (
    CandidateSample,
    Policy,
    PreparedCandidates,
    load_candidate_samples,
    prepare_candidates,
)
from mechscope.models.loaded import LoadedModel


def load_samples(path: str | Path) -> list[CandidateSample]:
    """Candidate samples; an ``audio`` / ``image`` path is made absolute after checking that
    the file exists and can be read (before any model loads)."""
    samples = load_candidate_samples(path)
    base = Path(path).resolve().parent
    for s in samples:
        extra = s.model_extra or {}
        kind = media_field(extra, s.id)
        if kind is not None:
            extra[kind] = str(resolve_media(extra[kind], kind, base, sample=s.id))
    return samples


def sample_media(sample: CandidateSample) -> tuple[str, Path] | None:
    """``(kind, path)`` of a sample's media file, None for a text sample."""
    extra = sample.model_extra or {}
    kind = media_field(extra, sample.id)
    return None if kind is None else (kind, Path(extra[kind]))


def prepare_modal_candidates(
    lm: LoadedModel,
    sample: CandidateSample,
    *,
    label_a: str,
    label_b: str,
    policy: Policy = "first",
    readout: int = -1,
    candidate_prefix: str | None = None,
) -> PreparedCandidates:
    """Tokenise a media sample through the processor; every check before model work."""
    found = sample_media(sample)
    assert found is not None
    kind, path = found
    if lm.modality != kind:
        has = f"an {lm.modality} model" if lm.modality else "a text model"
        raise InputError(
            f"expected a model that reads {kind}, {lm.spec} is {has}", sample=sample.id, field=kind
        )
    if sample.prompt is None:
        raise InputError(
            "expected a 'prompt' with an {" + kind + "} marker (chat messages are not rendered "
            "for media samples)",
            sample=sample.id,
            field="prompt",
        )
    text = render_prompt(sample.prompt, lm.processor, kind, sample=sample.id)  # type: ignore[arg-type]
    media = load_media(lm.processor, kind, path, sample=sample.id)  # type: ignore[arg-type]
    mp = encode_modal(lm.processor, lm.model.config, text, kind, media, sample=sample.id)  # type: ignore[arg-type]
    if not -len(mp.ids) <= readout < len(mp.ids):
        raise InputError(
            f"expected a readout index in [-{len(mp.ids)}, {len(mp.ids)})",
            sample=sample.id,
            field="readout",
        )
    words = prepare_candidates(
        sample.model_copy(update={"prompt": text}),
        lm.tokenizer,
        label_a=label_a,
        label_b=label_b,
        policy=policy,
        readout=-1,
        candidate_prefix=candidate_prefix,
    )
    longest = len(mp.ids) + max(len(w) for w in words.words) - 1
    if lm.max_context is not None and longest > lm.max_context:
        raise InputError(
            f"expected at most {lm.max_context} tokens, got {longest}",
            sample=sample.id,
            field="prompt",
        )
    return dataclasses.replace(
        words,
        prompt_ids=mp.ids,
        readout=readout % len(mp.ids),
        model_inputs=cast_inputs(mp.inputs, lm.dtype),
        spans=mp.spans,
    )
