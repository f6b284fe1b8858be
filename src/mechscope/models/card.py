"""Model cards: one declarative YAML file per family saying where each site lives.

Workflows never name a module path; they ask the engine for a site, and only the card knows
which module of a given family produces it. Adding a family means adding a YAML file to
``mechscope/models/cards/`` (or to a directory named by ``$MECHSCOPE_CARDS``); nothing else.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mechscope.errors import UnsupportedFamilyError

CARDS_DIR = Path(__file__).parent / "cards"


class ModelCard(BaseModel):
    """Where the sites of one model family live, relative to the loaded model.

    Paths are dotted attribute paths. ``attn``, ``o_proj``, ``attn_out`` and ``mlp_out`` are
    relative to one decoder layer; the others are relative to the top-level model.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    model_types: list[str] = Field(description="config.model_type values this card serves")
    auto_class: str = "AutoModelForCausalLM"
    embed: str
    layers: str
    attn: str
    o_proj: str = Field(description="module whose *input* is z, all heads concatenated")
    attn_out: str = Field(description="module whose output is what attention adds to the residual")
    mlp_out: str = Field(description="module whose output is what the MLP adds to the residual")
    final_norm: str
    unembed: list[str] = Field(description="modules applied in order after the final norm")
    n_heads: list[str] = ["num_attention_heads"]
    n_kv_heads: list[str] = ["num_key_value_heads"]
    n_layers: list[str] = ["num_hidden_layers"]
    d_model: list[str] = ["hidden_size"]
    head_dim: list[str] = ["head_dim"]
    logit_softcap: str | None = Field(None, description="config attribute of a final tanh softcap")
    logit_scale: str | None = Field(None, description="config attribute multiplying the logits")
    logit_divisor: str | None = Field(None, description="config attribute dividing the logits")
    residual_scale: str | None = Field(
        None,
        description="config attribute multiplying each sublayer's output before the residual "
        "add (Granite's residual_multiplier): attn_out / mlp_out are the scaled contributions",
    )
    text_config: str | None = Field(
        None,
        description="config attribute holding the language model's config (multimodal "
        "wrappers): head counts and sizes are read there",
    )
    mlp_down: str | None = Field(
        None,
        description="module (in a layer) whose input is mlp_post, the MLP's neurons; none "
        "for mixture-of-experts layers",
    )
    mlp_act: str | None = Field(
        None,
        description="module (in a layer) whose input is mlp_pre, the MLP's pre-activation (its "
        "activation function: TransformerLens' hook_pre)",
    )
    ln1: str | None = Field(
        None, description="norm (in a layer) before attention: the ln1_scale site"
    )
    ln2: str | None = Field(
        None,
        description="norm (in a layer) before the MLP: the ln2_scale site (the same module as "
        "ln1 where one norm feeds both, as in GPT-J)",
    )
    experts: str | None = Field(
        None,
        description="module (in a layer) called as experts(hidden, top_k_index, top_k_weights) "
        "in a mixture-of-experts layer: the router and expert_out sites",
    )
    parallel: bool | str = Field(
        False,
        description="attention and MLP read the same residual (GPT-J, Phi, Falcon, Cohere, "
        "NeoX), so there is no resid_mid; a string names the config attribute that says so",
    )
    attention: Literal["interface", "own"] = Field(
        "interface",
        description="interface: the family calls transformers' attention interface (pattern, "
        "attn_scores, q/k/v, suppression work); own: it computes attention in its own code, "
        "so those are refused",
    )
    causal: bool = True
    bidirectional_override: bool = Field(
        False, description="drop the causal mask the modeling code builds (LLaDA-style decoders)"
    )
    mask_token: str | None = Field(None, description="config attribute holding the mask token id")
    tiny_config: dict[str, Any] = Field(
        default_factory=dict, description="config class name and kwargs for tiny:<family>"
    )

    def config_value(self, config: Any, names: list[str], default: Any = None) -> Any:
        """First attribute of ``config`` among ``names`` that is set (not None)."""
        for name in names:
            value = getattr(config, name, None)
            if value is not None:
                return value
        return default


def _card_dirs() -> list[Path]:
    extra = os.environ.get("MECHSCOPE_CARDS")
    dirs = [Path(p) for p in extra.split(os.pathsep) if p] if extra else []
    return [*dirs, CARDS_DIR]


def read_card(path: Path) -> ModelCard:
    """One card file, or a one-line error naming the file and the field that is wrong."""
    try:
        data = yaml.safe_load(path.read_text())
        return ModelCard.model_validate(data)
    except yaml.YAMLError as exc:
        raise UnsupportedFamilyError(f"model card {path} is not valid YAML: {exc}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the card"
        raise UnsupportedFamilyError(
            f"model card {path}: field {where!r}: {err['msg'].lower()}"
        ) from exc


@cache
def _all_cards_cached(dirs: tuple[Path, ...]) -> dict[str, tuple[ModelCard, str]]:
    cards: dict[str, tuple[ModelCard, str]] = {}
    for d in reversed(dirs):  # user directories override the built-in cards
        source = "built-in" if d == CARDS_DIR else "user"
        for path in sorted(d.glob("*.yaml")):
            card = read_card(path)
            cards[card.family] = (card, source)
    return cards


def all_cards() -> dict[str, ModelCard]:
    """All known cards by family name (built-in plus ``$MECHSCOPE_CARDS``)."""
    return {f: card for f, (card, _) in _all_cards_cached(tuple(_card_dirs())).items()}


def card_source(card: ModelCard) -> str:
    """``built-in`` or ``user`` (a file in ``$MECHSCOPE_CARDS``) for a known card."""
    entry = _all_cards_cached(tuple(_card_dirs())).get(card.family)
    return entry[1] if entry is not None and entry[0] is card else "user"


def card_for_family(family: str) -> ModelCard:
    """The card of a family by its card name (e.g. ``llama``, ``llada``)."""
    cards = all_cards()
    if family in cards:
        return cards[family]
    raise UnsupportedFamilyError(_unsupported_message(family))


def find_card(config: Any) -> ModelCard | None:
    """The card a transformers config names (``mechscope_card``) or whose ``model_types``
    include its ``model_type``; None when no card does (the loader then derives one)."""
    explicit = getattr(config, "mechscope_card", None)
    if explicit:
        return card_for_family(explicit)
    model_type = getattr(config, "model_type", None)
    for card in all_cards().values():
        if model_type in card.model_types:
            return card
    return None


def card_for_config(config: Any) -> ModelCard:
    """The card matching a transformers config: an explicit ``mechscope_card`` wins."""
    card = find_card(config)
    if card is None:
        raise UnsupportedFamilyError(_unsupported_message(str(getattr(config, "model_type", None))))
    return card


def card_yaml(card: ModelCard) -> str:
    """A card as YAML a user can edit and keep in ``$MECHSCOPE_CARDS`` (defaults left out)."""
    data = card.model_dump(exclude_defaults=True)
    data = {"family": card.family, "model_types": card.model_types, **data}
    return yaml.safe_dump(data, sort_keys=False, width=100)


def _unsupported_message(family: str) -> str:
    known = ", ".join(sorted(all_cards()))
    return (
        f"no model card for family {family!r} (known: {known}); to add one, copy "
        f"{CARDS_DIR / 'llama.yaml'} to a directory named in $MECHSCOPE_CARDS, set model_types "
        "to your config.model_type and point each path at the module that holds that site"
    )
