"""A randomly initialised Llama-3.1-8B-shaped model, built on the device in bf16.

For time and memory rows on a GPU: random weights run the same kernels as trained ones.
It is wrapped with the built-in llama card and the tiny test tokenizer: benchmarks give it
token ids, not text.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA_31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
}


def random_llama_8b(device: str = "cuda", dtype: torch.dtype = torch.bfloat16):
    """(LoadedModel) Llama-3.1-8B-shaped, weights ~ N(0, 0.02), on ``device`` in ``dtype``."""
    from mechscope.models import LoadedModel, all_cards
    from mechscope.models.tiny import tiny_tokenizer

    config = LlamaConfig(**LLAMA_31_8B)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = None  # random weights: decode to the budget
    tok = tiny_tokenizer()
    return LoadedModel(
        model=model, tokenizer=tok, card=all_cards()["llama"], spec="llama-3.1-8b-shaped"
    )
