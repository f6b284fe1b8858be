"""Model loading and model cards."""

from mechscope.models.card import ModelCard, all_cards, card_for_config, card_for_family
from mechscope.models.loaded import LoadedModel
from mechscope.models.loading import ALIASES, DEFAULT_MODEL, cache_dir, load_model, load_tokenizer

__all__ = [
    "ALIASES",
    "DEFAULT_MODEL",
    "LoadedModel",
    "ModelCard",
    "all_cards",
    "cache_dir",
    "card_for_config",
    "card_for_family",
    "load_model",
    "load_tokenizer",
]
