"""How far back a layer attends, and how positions enter attention, read off the config.

A prefix cache (:mod:`mechscope.engine.interventions.prefix`) and the slot cache of
continuous batching (:mod:`mechscope.engine.generation.slot_cache`) are exact only while
every layer sees every earlier position: a sliding window, GPT-Neo's local attention, Llama
4's attention chunks or Doge's kept keys all end that at their length.
:func:`attention_span` is the shortest such length a config declares; up to it every layer
is plain causal attention. A layer kind whose length the config does not give makes the span
0 (nothing is claimed).

ALiBi (Bloom, MPT, Falcon-RW) computes its position bias from the attention mask or the
key length in each family's own code, which a slot cache's 4-D mask and padded columns do
not reproduce: such models decode in lock step (:mod:`mechscope.engine.generation.generate`).
Llama 4 scales the queries of its NoPE layers by a temperature computed from a token's
absolute index in the sequence, not from its position: left padding shifts it
(:func:`absolute_position_scaling`).
Everything read here is also proven on tiny models whose spans are shorter than the
conformance probe's input (:mod:`mechscope.models.tiny_types`,
:mod:`mechscope.engine.conformance.probe`).
"""

from __future__ import annotations

from typing import Any

#: Config attributes that bound how many positions a layer attends to.
SPAN_ATTRIBUTES = (
    "sliding_window",  # Mistral, Gemma 2/3, gpt-oss, Cohere 2, OLMo 3, ...
    "window_size",  # GPT-Neo's local layers
    "attention_chunk_size",  # Llama 4, Gemma 4: attention within fixed chunks
    "sliding_window_size",
    "local_attention_window_len",
    "attention_window_size",
    "keep_window_size",  # Doge: the dynamic mask keeps this many keys
    "local_attention",  # ModernBERT decoder: a window of this width around each query
)
#: Layer kinds that attend to every earlier position.
FULL_LAYERS = frozenset({"full_attention", "global", "hybrid"})
#: Layer kinds whose length one of :data:`SPAN_ATTRIBUTES` gives.
LIMITED_LAYERS = frozenset({"sliding_attention", "chunked_attention", "local", "hybrid_sliding"})


def _layer_kinds(config: Any) -> set[str] | None:
    kinds = getattr(config, "layer_types", None) or getattr(config, "attention_layers", None)
    return {str(k) for k in kinds} if isinstance(kinds, list | tuple) else None


def _declared(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    if name == "sliding_window" and getattr(config, "use_sliding_window", True) is False:
        return None  # Qwen 2/3 keep the attribute with the switch off
    return value


def attention_span(config: Any) -> int | None:
    """The fewest earlier positions (the query included) some layer is limited to; None
    when every layer attends to the whole sequence. Up to this length every layer is
    plain causal attention."""
    kinds = _layer_kinds(config)
    spans = [v for name in SPAN_ATTRIBUTES if (v := _declared(config, name)) is not None]
    if kinds is not None:
        if kinds <= FULL_LAYERS:
            return None  # a window attribute no layer uses (Qwen 2's switched-off one)
        if not kinds <= FULL_LAYERS | LIMITED_LAYERS or not spans:
            return 0  # a layer kind of unknown reach: claim nothing
    return min(spans) if spans else None


def uses_alibi(config: Any) -> bool:
    """Whether the config turns ALiBi position biases on (Falcon's ``alibi``, MPT's
    ``attn_config.alibi``, a ``position_embedding_type`` of ``alibi``)."""
    attn = getattr(config, "attn_config", None)
    return bool(
        getattr(config, "alibi", False) is True
        or getattr(attn, "alibi", False) is True
        or (isinstance(attn, dict) and attn.get("alibi") is True)
        or getattr(config, "position_embedding_type", None) == "alibi"
    )


def absolute_position_scaling(config: Any) -> int | None:
    """The sequence length from which some layer scales attention by a token's absolute
    index rather than its position id, so that left padding changes what a row computes;
    None where nothing does. Llama 4's attention temperature on its NoPE layers is
    ``log1p(floor((i + 1) / floor_scale)) · attn_scale + 1`` at index ``i``: 1 (no scaling)
    below index ``floor_scale - 1``, so a padded batch shorter than ``floor_scale`` tokens
    computes each row as it computes alone."""
    if getattr(config, "attn_temperature_tuning", False) is not True:
        return None
    no_rope = getattr(config, "no_rope_layers", None)
    if isinstance(no_rope, list | tuple) and all(no_rope):
        return None  # every layer uses rotary embeddings: no temperature anywhere
    floor = getattr(config, "floor_scale", None)
    return int(floor) if isinstance(floor, int | float) and floor >= 1 else 1
