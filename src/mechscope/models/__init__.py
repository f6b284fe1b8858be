"""Model loading and model cards."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.models.aliases import ALIASES, DEFAULT_MODEL
    from mechscope.models.card import ModelCard, all_cards, card_for_config, card_for_family
    from mechscope.models.loaded import LoadedModel
    from mechscope.models.loading import cache_dir, load_model, load_tokenizer

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

lazy_package(__name__)
