"""Tiny randomly initialised models of any ``model_type`` the installed transformers knows.

A family without weights here (Mixtral, GPT-OSS, DeepSeek V3, …) is tested on a model built
from its own config class and modeling code, shrunk to a few layers of width 64: every size
field a config may use is set small, per-layer lists are cut to the layer count (keeping one
of each layer kind, so a sliding-window family keeps a full-attention layer), dropouts are
zeroed, and the few families that need more say so in ``tiny_overrides.yaml`` (Falcon turns
ALiBi on there). Every sliding window, local window and attention chunk is 8 tokens, shorter
than the conformance probe's input, so the windowed and chunked paths (prefix resume,
generation past the window) are what the probe and the support table check.
``tiny:<type>`` loads one (:func:`mechscope.models.load_model`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import torch
import transformers
import yaml
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from mechscope.errors import ModelSpecError

N_LAYERS = 3
MAX_PARAMS = 5_000_000
#: Size fields of transformers configs and their tiny values (set only where the config has them).
SIZES: dict[str, int] = {
    "hidden_size": 64,
    "n_embd": 64,
    "d_model": 64,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "n_inner": 128,
    "ffn_hidden_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_hidden_layers": N_LAYERS,
    "n_layer": N_LAYERS,
    "num_layers": N_LAYERS,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "num_kv_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "n_positions": 512,
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    # every length a layer's attention is limited to, shorter than the probe's input
    "sliding_window": 8,
    "window_size": 8,
    "attention_chunk_size": 8,
    "sliding_window_size": 8,
    "local_attention_window_len": 8,
    "attention_window_size": 8,
    "keep_window_size": 8,
    "local_attention": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 12,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "rotary_dim": 8,
}
OVERRIDES = Path(__file__).parent / "tiny_overrides.yaml"
#: The families researchers use most (and the architectures their quirks come from): each
#: must run out of the box, tested on every check in the default suite.
NAMED_TYPES = [
    "llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "gemma", "gemma2", "gemma3_text",
    "gemma3", "mistral", "ministral", "mixtral", "phi", "phi3", "phimoe", "olmo", "olmo2",
    "olmo3", "olmoe", "deepseek_v2", "deepseek_v3", "gpt_oss", "smollm3", "granite",
    "granitemoe", "cohere", "cohere2", "falcon", "bloom", "opt", "gpt2", "gpt_neox", "gptj",
    "stablelm", "starcoder2", "glm", "glm4", "helium", "exaone4",
]  # fmt: skip


@cache
def _overrides() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(OVERRIDES.read_text()) or {}


def known_model_types() -> list[str]:
    """Every model_type with a causal-LM class in the installed transformers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _shrink(defaults: dict[str, Any]) -> dict[str, Any]:
    """Tiny values for the size fields, dropouts and per-layer lists of one config dict."""
    n_layers = next(
        (defaults[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in defaults),
        None,
    )
    kwargs: dict[str, Any] = {}
    for key, value in defaults.items():
        if isinstance(value, bool):
            continue
        if key in SIZES and (isinstance(value, int) or (key == "head_dim" and value is None)):
            kwargs[key] = SIZES[key]
        elif ("dropout" in key or key.endswith("pdrop")) and isinstance(value, float):
            kwargs[key] = 0.0
        elif isinstance(value, list) and n_layers and len(value) == n_layers > N_LAYERS:
            kwargs[key] = _cut_layers(value)
    if "qk_rope_head_dim" in defaults:  # multi-head latent attention: rotary on part of q/k
        rope, nope = SIZES["qk_rope_head_dim"], SIZES["qk_nope_head_dim"]
        kwargs.update(
            head_dim=rope, qk_head_dim=rope + nope, num_key_value_heads=SIZES["num_attention_heads"]
        )
        kwargs = {k: v for k, v in kwargs.items() if k in defaults or k == "head_dim"}
    return kwargs


def _cut_layers(values: list[Any]) -> list[Any]:
    """The first layers of a per-layer list, ending with a layer of another kind if the list
    has one (``[sliding, sliding, full]``), so every kind of layer is exercised."""
    head = values[: N_LAYERS - 1]
    other = next((v for v in values[N_LAYERS - 1 :] if v not in head), values[N_LAYERS - 1])
    return [*head, other]


def tiny_config(model_type: str, vocab_size: int, token_ids: dict[str, int]) -> PretrainedConfig:
    """A tiny config of ``model_type`` (``vocab_size`` and special ids of the tiny tokenizer)."""
    try:
        defaults = AutoConfig.for_model(model_type).to_dict()
    except (KeyError, ValueError) as exc:
        raise ModelSpecError(f"unknown model type {model_type!r} for tiny:") from exc
    kwargs = _shrink(defaults)
    for sub in ("text_config", "vision_config", "audio_config"):
        if isinstance(defaults.get(sub), dict):
            kwargs[sub] = {**defaults[sub], **_shrink(defaults[sub])}
    kwargs.update(vocab_size=vocab_size, **token_ids)
    if isinstance(kwargs.get("text_config"), dict):
        kwargs["text_config"].update(vocab_size=vocab_size, **token_ids)
    for key, value in _overrides().get(model_type, {}).items():
        if isinstance(value, dict) and isinstance(kwargs.get(key), dict):
            kwargs[key] = {**kwargs[key], **value}
        else:
            kwargs[key] = value
    return AutoConfig.for_model(model_type, **kwargs)


def build_tiny_type(model_type: str, tokenizer: Any, seed: int = 0) -> PreTrainedModel:
    """A seeded tiny model of ``model_type`` through ``AutoModelForCausalLM``."""
    ids = {
        name: getattr(tokenizer, name)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id")
        if getattr(tokenizer, name) is not None
    }
    config = tiny_config(model_type, len(tokenizer), ids)
    with torch.device("meta"):  # count first: a config the shrink missed can be gigabytes
        size = sum(
            p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters()
        )
    if size > MAX_PARAMS:
        raise ModelSpecError(
            f"tiny {model_type} still has {size / 1e6:.0f}M parameters: its config has sizes "
            "the generic shrink does not know (add them to tiny_overrides.yaml)"
        )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # random-init norms are all alike (ones, zeros); real ones differ,
        for param in model.parameters():  # and a check must be able to tell them apart
            if param.dim() == 1:
                param.add_(torch.randn(param.shape) * 0.1)
    return model.eval()
