"""Multimodal language models: which modality a model reads and where its placeholders are.

An audio-text or image-text model (Qwen2-Audio, LLaVA, Qwen2-VL, Gemma 3 4B+) is a language
model whose input embeddings get encoder outputs scattered in at placeholder tokens: the
processor expands one placeholder per audio clip or image into as many tokens as the encoder
emits. The engine addresses the language model inside (its card is derived from
``text_config``, :mod:`mechscope.models.derive`) and hands the processor's other outputs
(``input_features``, ``pixel_values`` …) to the wrapper's forward, so the model merges them
itself: no modality code of mechscope stands between the processor and the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import transformers

from mechscope.errors import ModelSpecError
from mechscope.models.card import ModelCard

Modality = Literal["audio", "image"]
#: The auto class of every multimodal model mechscope loads. Its forward takes the
#: processor's outputs; unlike a causal LM's it may not take ``logits_to_keep``
#: (Qwen2-Audio), so the engine selects logit positions itself for this class.
MODAL_AUTO = "AutoModelForMultimodalLM"
#: Config attributes naming the placeholder token, by modality, in the order tried.
_TOKEN_ATTRS: dict[str, tuple[str, ...]] = {
    "audio": ("audio_token_index", "audio_token_id"),
    "image": ("image_token_index", "image_token_id"),
}
#: Why a multimodal model refuses prefix reuse (``LoadedModel.refused["resume"]``).
RESUME_REFUSAL = (
    "a multimodal model's encoder inputs cannot be split at a position, so prefix reuse "
    "is off and every pass runs the whole prompt"
)


def modality(config: Any) -> Modality | None:
    """``audio`` or ``image`` for a multimodal wrapper's config, None for a text model."""
    if getattr(config, "audio_config", None) is not None:
        return "audio"
    if getattr(config, "vision_config", None) is not None:
        return "image"
    return None


def placeholder_id(config: Any, kind: Modality) -> int:
    """The token id the processor expands into the ``kind`` span."""
    for attr in _TOKEN_ATTRS[kind]:
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    raise ModelSpecError(
        f"{type(config).__name__} names no {kind} placeholder token "
        f"({' or '.join(_TOKEN_ATTRS[kind])}), so its {kind} span cannot be found"
    )


#: Begin/end tokens a placeholder sits between where the model locates media by them
#: (Qwen2-VL's rotary positions start at ``<|vision_start|>``), used when the tokenizer has them.
_IMAGE_WRAP = ("<|vision_start|>", "<|vision_end|>")


def placeholder_text(processor: Any, kind: Modality) -> str:
    """The text a prompt's ``{audio}`` / ``{image}`` marker becomes: the processor's own
    placeholder (Gemma 3's is its begin-of-image token, which it expands), inside the
    begin/end tokens where the processor or tokenizer has them (Qwen2-Audio's
    ``<|audio_bos|><|AUDIO|><|audio_eos|>``, Qwen2-VL's
    ``<|vision_start|><|image_pad|><|vision_end|>``)."""
    token = getattr(processor, f"{kind}_token", None)
    if not isinstance(token, str):
        raise ModelSpecError(f"{type(processor).__name__} names no {kind} token")
    if kind == "audio":
        bos = getattr(processor, "audio_bos_token", None)
        eos = getattr(processor, "audio_eos_token", None)
        return f"{bos or ''}{token}{eos or ''}"
    added = set(getattr(processor.tokenizer, "get_added_vocab", dict)())
    if all(t in added for t in _IMAGE_WRAP):
        return f"{_IMAGE_WRAP[0]}{token}{_IMAGE_WRAP[1]}"
    return token


def modal_card(card: ModelCard) -> ModelCard:
    """The card of a multimodal wrapper: the language model's, run through the wrapper."""
    return card.model_copy(update={"auto_class": MODAL_AUTO})


def load_processor(root: Path) -> Any:
    """The model directory's processor (tokenizer + feature extractor / image processor)."""
    try:
        return transformers.AutoProcessor.from_pretrained(root)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelSpecError(
            f"{root}: a multimodal model needs its processor files "
            f"(preprocessor_config.json, tokenizer): {first}"
        ) from exc
