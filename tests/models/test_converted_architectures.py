"""A converted model's config.json names its class (``architectures``), which TransformerLens'
bridge and vLLM read; a conversion cached before that gets it on its next load."""

from __future__ import annotations

import json

from mechscope.models import loading


def test_an_old_cached_conversion_gets_its_architectures(tmp_path, monkeypatch):
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))
    folder = tmp_path / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    config = {"model_type": "llama", "architectures": None, "hidden_size": 8}
    (folder / "config.json").write_text(json.dumps(config))
    assert loading._alias_path("smollm2-135m") == folder  # no conversion: only the field
    fixed = json.loads((folder / "config.json").read_text())
    assert fixed == {**config, "architectures": ["LlamaForCausalLM"]}
    assert loading.has_architectures(folder)


def test_convert_gguf_writes_architectures(tmp_path, monkeypatch):
    import torch
    import transformers

    from mechscope.models.card import all_cards
    from mechscope.models.tiny import build_tiny, tiny_tokenizer

    model, _ = build_tiny(all_cards()["llama"], seed=0)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda *a, **k: tiny_tokenizer())
    loading.convert_gguf(tmp_path / "x.gguf", tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [type(model).__name__]
    reloaded = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained(tmp_path / "out")
    )
    assert isinstance(reloaded, torch.nn.Module)
