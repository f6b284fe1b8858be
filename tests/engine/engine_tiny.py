"""Tiny random models of families without a built-in card, and independent references.

Each model is built from a transformers config and wrapped with a hand-written card (the
derived-card machinery will replace these). References never go through the engine: the
family's own eager attention (``attn_implementation="eager"``), plain torch hooks, and an
attention function that adds a suppression block to the family's eager mask.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
import torch
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from mechscope.models.card import ModelCard
from mechscope.models.loaded import LoadedModel
from mechscope.models.tiny import tiny_tokenizer

SEQ = 12

LLAMA_LIKE = {
    "embed": "model.embed_tokens",
    "layers": "model.layers",
    "attn": "self_attn",
    "o_proj": "self_attn.o_proj",
    "attn_out": "self_attn",
    "mlp_out": "mlp",
    "mlp_down": "mlp.down_proj",
    "final_norm": "model.norm",
    "unembed": ["lm_head"],
}
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


def build(model_type: str, card: dict[str, Any], *, seed: int = 0, **config: Any) -> LoadedModel:
    """A seeded random ``model_type`` model in fp32 with the tiny tokenizer and ``card``."""
    tok = tiny_tokenizer()
    cfg = AutoConfig.for_model(
        model_type,
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        **config,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    full = {"family": model_type, "model_types": [model_type], **LLAMA_LIKE, **card}
    return LoadedModel(
        model=model, tokenizer=tok, card=ModelCard(**full), spec=f"test:{model_type}"
    )


def ids(lm: LoadedModel, seq: int = SEQ, batch: int = 2, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, seq), generator=gen)


def eager_copy(lm: LoadedModel, implementation: str = "eager") -> torch.nn.Module:
    """An independent copy of the model running ``implementation`` attention."""
    model = copy.deepcopy(lm.model)
    model.set_attn_implementation(implementation)
    for module in model.modules():
        for attr in ("_mechscope_layer", "_mechscope_bidirectional"):
            if hasattr(module, attr):
                delattr(module, attr)
    return model


def suppressed_eager(lm: LoadedModel, start: int, end: int) -> torch.nn.Module:
    """The family's eager attention on HF's own eager masks (sliding windows included), with
    keys ``[start, end)`` blocked for the queries after them: suppression's reference."""

    def attend(module, query, key, value, attention_mask, **kwargs):
        eager = sys.modules[type(module).__module__].eager_attention_forward
        q_len, k_len = query.shape[2], key.shape[2]
        k_idx = torch.arange(k_len)[None, :]
        q_idx = torch.arange(k_len - q_len, k_len)[:, None]
        block = (q_idx >= end) & (k_idx >= start) & (k_idx < end)  # [q, k]
        if attention_mask is None:
            attention_mask = torch.zeros(1, 1, q_len, k_len, dtype=query.dtype)
        mask = attention_mask.masked_fill(block, torch.finfo(query.dtype).min)
        return eager(module, query, key, value, mask, **kwargs)

    AttentionInterface.register("test_suppressed", attend)
    AttentionMaskInterface.register("test_suppressed", eager_mask)
    return eager_copy(lm, "test_suppressed")


def logits_of(model: torch.nn.Module, input_ids: torch.Tensor, **kwargs: Any) -> Any:
    with torch.no_grad():
        return model(input_ids=input_ids, **kwargs)


class Capture:
    """Plain torch hooks recording a module's input or output (no engine involved)."""

    def __init__(self, module: torch.nn.Module, *, output: bool = False):
        self.value: Any = None
        if output:
            self.handle = module.register_forward_hook(self._out)
        else:
            self.handle = module.register_forward_pre_hook(self._in, with_kwargs=True)

    def _in(self, module, args, kwargs):
        self.value = args[0] if args else next(iter(kwargs.values()))

    def _out(self, module, args, output):
        self.value = output[0] if isinstance(output, tuple) else output

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine). Import
    this fixture into a test module to use it there."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
