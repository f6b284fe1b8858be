"""A Llama-family Hugging Face model as a TransformerLens 3 ``HookedSAETransformer``, for
SAELens's side of the feature checks and benchmarks (run in SAELens's own environment).

TransformerLens 3 loads models by their hub name only, and does not know SmolLM2: the
config is built here from the HF ``config.json`` with the fields TransformerLens's own
``LlamaForCausalLM`` branch sets (RMSNorm, rotary embeddings on halves, gated SiLU MLP,
grouped-query attention), and the weights go through its own conversion
(``convert_llama_weights``), unfolded and uncentred so the pass computes what the HF model
computes, term for term.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformer_lens import HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions import convert_llama_weights
from transformers import AutoModelForCausalLM


def tl_config(hf_config) -> HookedTransformerConfig:
    """TransformerLens's config of a Llama-family ``hf_config``."""
    n_heads, n_kv = hf_config.num_attention_heads, hf_config.num_key_value_heads
    d_head = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads
    rope = getattr(hf_config, "rope_parameters", None) or {}
    base = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    return HookedTransformerConfig(
        d_model=hf_config.hidden_size,
        d_head=d_head,
        n_heads=n_heads,
        d_mlp=hf_config.intermediate_size,
        n_layers=hf_config.num_hidden_layers,
        n_ctx=min(hf_config.max_position_embeddings, 2048),
        eps=hf_config.rms_norm_eps,
        d_vocab=hf_config.vocab_size,
        act_fn=hf_config.hidden_act,
        n_key_value_heads=n_kv if n_kv != n_heads else None,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_adjacent_pairs=False,
        rotary_dim=d_head,
        rotary_base=base,
        final_rms=True,
        gated_mlp=True,
        original_architecture="LlamaForCausalLM",
        tokenizer_prepends_bos=True,
        default_prepend_bos=False,
        dtype=torch.float32,
        device="cpu",
    )


def load_tl(folder: str | Path):
    """``(HookedSAETransformer, HF model)`` of the HF Llama in ``folder``, fp32 on the CPU."""
    from sae_lens import HookedSAETransformer

    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    cfg = tl_config(hf.config)
    state = convert_llama_weights(hf, cfg)
    if hf.config.tie_word_embeddings:  # the conversion reads lm_head, tied or not
        state["unembed.W_U"] = hf.model.embed_tokens.weight.T
    tl = HookedSAETransformer(cfg)
    tl.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False,
        fold_value_biases=False, refactor_factored_attn_matrices=False,
    )  # fmt: skip
    return tl.eval(), hf
