"""Gemma 3 270M (alias gemma3-270m, slow): loading, and two behaviours a real model must show.

Measured on the converted model (fp32, CPU): the IOI logit difference ' Mary' - ' John' on
the classic prompt is +5.22, and ' Paris' is third after "The capital of France is" (after
' the' and ' a'). The converted safetensors give the same logits as transformers loading the
GGUF directly (max |difference| 0.0 on four prompts).
"""

from __future__ import annotations

import json

import pytest
import torch

from mechscope.models import cache_dir

pytestmark = pytest.mark.slow

IOI_PROMPT = "When Mary and John went to the store, John gave a drink to"


def _last_logits(lm, prompt: str) -> torch.Tensor:
    ids = lm.tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        return lm.model(ids).logits[0, -1].float()


def _token(lm, text: str) -> int:
    ids = lm.tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_gemma3_alias_is_converted_gemma3_text(gemma3) -> None:
    """The cached conversion is a plain safetensors directory of model_type gemma3_text, and the
    built-in gemma3 card applies (sizes of Gemma 3 270M)."""
    target = cache_dir() / "models" / "gemma3-270m"
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and "quantization_config" not in config
    assert (target / "model.safetensors").exists() and not list(target.glob("*.gguf"))
    assert gemma3.card.family == "gemma3_text" and gemma3.config.model_type == "gemma3_text"
    assert (gemma3.n_layers, gemma3.n_heads, gemma3.n_kv_heads) == (18, 4, 1)
    assert gemma3.d_model == 640 and gemma3.vocab_size == 262144
    assert type(gemma3.model).__name__ == "Gemma3ForCausalLM"


def test_gemma3_ioi_logit_diff_is_positive(gemma3) -> None:
    logits = _last_logits(gemma3, IOI_PROMPT)
    diff = logits[_token(gemma3, " Mary")] - logits[_token(gemma3, " John")]
    assert diff > 0  # +5.22 measured


def test_gemma3_paris_is_in_top_3(gemma3) -> None:
    top = _last_logits(gemma3, "The capital of France is").topk(3).indices.tolist()
    assert _token(gemma3, " Paris") in top, [gemma3.tokenizer.decode([i]) for i in top]
