"""Derived cards: read off the model, equal to the hand-written ones, refused when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from mechscope.engine import Engine, Read, Site
from mechscope.errors import UnsupportedFamilyError
from mechscope.models import all_cards, load_model
from mechscope.models.card import card_yaml, read_card
from mechscope.models.derive import CardDerivationError, derive_card

#: The fields that say where sites live and how to read the config: a derived card must
#: agree with the hand-written one on all of them.
STRUCTURE = (
    "embed",
    "layers",
    "attn",
    "o_proj",
    "attn_out",
    "mlp_out",
    "mlp_down",
    "experts",
    "mlp_act",
    "ln1",
    "ln2",
    "final_norm",
    "unembed",
)
#: Config attributes a card may name: compared by the value they hold in the config.
SCALARS = ("logit_softcap", "residual_scale", "logit_scale", "logit_divisor")
CAUSAL_CARDS = sorted(f for f, c in all_cards().items() if c.causal)


def _structure(card, config) -> dict:
    paths = {field: getattr(card, field) for field in STRUCTURE}
    values = {f: getattr(config, getattr(card, f)) if getattr(card, f) else None for f in SCALARS}
    return {**paths, **values}


@pytest.mark.parametrize("family", CAUSAL_CARDS)
def test_derived_card_equals_the_built_in_one(family: str) -> None:
    lm = load_model(f"tiny:{family}")
    derived = derive_card(lm.model)
    assert _structure(derived, lm.config) == _structure(lm.card, lm.config)
    assert bool(derived.parallel) == lm.parallel


def test_derived_llama_card_gives_bit_identical_results(stories_path: Path) -> None:
    """The real stories260K model with its card derived and with the built-in llama card:
    every site and the logits are bit-identical (the cards point at the same modules)."""
    built_in = load_model(str(stories_path))
    derived = load_model(str(stories_path), card="derive")
    assert derived.card_source == "derived" and built_in.card_source == "built-in"
    ids = torch.randint(10, 500, (2, 12), generator=torch.Generator().manual_seed(0))
    names = ("resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "mlp_post", "pattern")
    reads = [Read(Site(n, l)) for l in range(built_in.n_layers) for n in names]
    a, b = Engine.of(built_in).run(ids, reads), Engine.of(derived).run(ids, reads)
    assert torch.equal(a.logits, b.logits)
    for site in a.reads:
        assert torch.equal(a[site], b[site]), site


def test_a_llama_card_on_olmo2_is_refused_naming_the_residual_check(tmp_path: Path) -> None:
    """OLMo 2 normalises each sublayer's output before the residual add: a copy of the llama
    card reads attn_out / mlp_out before those norms, which the probe must catch."""
    card = yaml.safe_load(card_yaml(all_cards()["llama"]))
    card.update(family="olmo2_as_llama", model_types=["olmo2"])
    path = tmp_path / "olmo2.yaml"
    path.write_text(yaml.safe_dump(card))
    lm = load_model("tiny:olmo2", card=str(path))
    assert lm.card_source == "user"
    with pytest.raises(UnsupportedFamilyError, match="residual") as info:
        Engine.of(lm)
    assert "\n" not in str(info.value)
    assert load_model("tiny:olmo2").card.attn_out == "post_attention_layernorm"


@pytest.mark.parametrize(
    ("field", "wrong", "check"),
    [
        ("o_proj", "self_attn.q_proj", "z"),
        ("final_norm", "model.layers.0.input_layernorm", "lens"),
        ("mlp_out", "post_attention_layernorm", "residual"),
    ],
)
def test_the_probe_refuses_a_wrong_path(tmp_path: Path, field: str, wrong: str, check: str):
    card = yaml.safe_load(card_yaml(all_cards()["llama"]))
    card.update(family="bad_llama", **{field: wrong})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(card))
    lm = load_model("tiny:llama", card=str(path))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # random-init norms are all alike; real ones are not
        for p in lm.model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    with pytest.raises(UnsupportedFamilyError, match=f"probe: {check} failed"):
        Engine.of(lm)


def test_card_yaml_round_trips(tmp_path: Path) -> None:
    card = derive_card(load_model("tiny:mixtral").model)
    path = tmp_path / "mixtral.yaml"
    path.write_text(card_yaml(card))
    assert read_card(path) == card
    assert card.experts == "mlp.experts" and card.mlp_down is None


def test_a_broken_user_card_is_one_line(tmp_path: Path) -> None:
    card = yaml.safe_load(card_yaml(all_cards()["llama"]))
    card.update(layers=["model", "layers"])
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(card))
    with pytest.raises(UnsupportedFamilyError, match="field 'layers'") as info:
        read_card(path)
    assert "\n" not in str(info.value)
    path.write_text("family: [unclosed\n")
    with pytest.raises(UnsupportedFamilyError, match="not valid YAML"):
        read_card(path)


def test_derivation_names_what_is_missing() -> None:
    from transformers import BertConfig, BertLMHeadModel

    config = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        vocab_size=300, is_decoder=True,
    )  # fmt: skip
    with pytest.raises(CardDerivationError, match="cannot derive a model card for 'bert'"):
        derive_card(BertLMHeadModel(config).eval())


def test_scales_and_multimodal_wrappers_are_read_off_the_config() -> None:
    granite = load_model("tiny:granite")
    assert granite.card_source == "derived"
    assert granite.card.residual_scale == "residual_multiplier"
    assert granite.card.logit_divisor == "logits_scaling"
    cohere = load_model("tiny:cohere")
    assert cohere.card.logit_scale == "logit_scale" and cohere.parallel
    gemma3 = load_model("tiny:gemma3")  # Gemma3ForConditionalGeneration: the text model inside
    assert gemma3.card.text_config == "text_config"
    assert gemma3.card.layers == "model.language_model.layers"
    assert gemma3.n_layers == gemma3.model.config.text_config.num_hidden_layers
