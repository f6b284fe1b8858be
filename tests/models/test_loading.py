"""Model loading: specs, cards, tiny models, GGUF conversion, errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml

from mechscope.errors import ModelSpecError, UnsupportedFamilyError
from mechscope.models import all_cards, card_for_config, load_model
from mechscope.models.card import CARDS_DIR
from tolerance import assert_rounding_close, depth_of

REQUIRED_FAMILIES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma3_text",
    "gpt2",
    "gpt_neox",
    "llada",
}


def test_required_families_have_cards() -> None:
    cards = all_cards()
    assert set(cards) >= REQUIRED_FAMILIES
    assert any(not c.causal and c.auto_class == "AutoModelForMaskedLM" for c in cards.values())
    llada = cards["llada"]
    assert not llada.causal and llada.bidirectional_override and llada.mask_token


def test_tiny_models_are_seeded() -> None:
    a = load_model("tiny:llama", seed=3).model.state_dict()
    b = load_model("tiny:llama", seed=3).model.state_dict()
    c = load_model("tiny:llama", seed=4).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_tiny_tokenizer_round_trips_text() -> None:
    lm = load_model("tiny:gpt2")
    text = "When Mary and John went to the store, 12 + 7 = 19 ünïcode"
    ids = lm.tokenizer(text).input_ids
    assert lm.tokenizer.decode(ids, skip_special_tokens=True) == text
    assert lm.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_unknown_spec_lists_aliases(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="smollm2-135m"):
        load_model(str(tmp_path / "nope"))


def test_unknown_family_says_how_to_add_a_card() -> None:
    class Config:
        model_type = "brand_new_lm"

    with pytest.raises(UnsupportedFamilyError, match="MECHSCOPE_CARDS") as info:
        card_for_config(Config())
    assert "brand_new_lm" in str(info.value)


def test_user_card_directory(tmp_path: Path, monkeypatch) -> None:
    card = yaml.safe_load((CARDS_DIR / "llama.yaml").read_text())
    card.update(family="my_llama", model_types=["my_llama"])
    (tmp_path / "my_llama.yaml").write_text(yaml.safe_dump(card))
    monkeypatch.setenv("MECHSCOPE_CARDS", str(tmp_path))

    class Config:
        model_type = "my_llama"

    assert card_for_config(Config()).family == "my_llama"


def test_local_directory_and_dtype(stories_path: Path) -> None:
    lm = load_model(str(stories_path), dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and lm.card.family == "llama"
    assert lm.n_layers == 5 and lm.n_heads == 8 and lm.n_kv_heads == 4


def test_gguf_file_roundtrip(tmp_path: Path) -> None:
    """A .gguf spec loads through transformers' gguf_file path (written here with gguf)."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    lm = load_model("tiny:llama")
    _write_llama_gguf(gguf, lm, path)
    loaded = load_model(str(path))
    assert loaded.n_layers == lm.n_layers and loaded.card.family == "llama"
    ids = torch.tensor([[1, 5, 9, 20]])
    with torch.no_grad():
        got, want = loaded.model(ids).logits, lm.model(ids).logits
    assert_rounding_close(got, want, depth=depth_of(lm), msg="GGUF round trip")


def _write_llama_gguf(gguf, lm, path: Path) -> None:
    """Write a tiny llama to GGUF with llama.cpp's tensor names (f32, no quantisation)."""
    import numpy as np

    cfg = lm.model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(
        cfg.rope_parameters["rope_theta"]
        if hasattr(cfg, "rope_parameters") and cfg.rope_parameters
        else 10000.0
    )
    vocab = lm.tokenizer.convert_ids_to_tokens(list(range(len(lm.tokenizer))))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab)
    w.add_token_types([1] * len(vocab))
    merges = lm.tokenizer.backend_tokenizer.to_str()
    import json

    w.add_token_merges(
        [" ".join(m) if isinstance(m, list) else m for m in json.loads(merges)["model"]["merges"]]
    )
    w.add_bos_token_id(lm.tokenizer.bos_token_id)
    w.add_eos_token_id(lm.tokenizer.eos_token_id)
    sd = {k: v.float().numpy() for k, v in lm.model.state_dict().items()}
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads

    def permute(x: np.ndarray, heads: int) -> np.ndarray:  # HF rotary layout -> llama.cpp
        return (
            x.reshape(heads, 2, x.shape[0] // heads // 2, *x.shape[1:])
            .swapaxes(1, 2)
            .reshape(x.shape)
        )

    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], n_head))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], n_kv))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.slow
def test_smollm2_alias_loads_from_cache_fast(smollm2) -> None:
    """After the one-time conversion the alias loads from safetensors in well under a second
    of model loading (measured here without tokenizer warm-up effects)."""
    assert smollm2.n_layers == 30 and smollm2.n_heads == 9 and smollm2.n_kv_heads == 3
    assert smollm2.vocab_size == 49152
    start = time.perf_counter()
    load_model("smollm2-135m")
    assert time.perf_counter() - start < 5.0  # generous bound on a loaded 2-core machine
