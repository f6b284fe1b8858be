"""Sparse dictionaries (SAEs, transcoders) beside the model: one type, read from and written
to every published layout. They sit at the models' layer, so the engine splices them as
sites and the ``features`` workflow trains, evaluates and explains them."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.dictionaries.crosslayer import CrossLayerSource, CrossLayerTranscoder
    from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig, Hook
    from mechscope.dictionaries.layouts.saelens import save_saelens
    from mechscope.dictionaries.load import describe, detect, load_dictionary
    from mechscope.dictionaries.sets import DictionarySet

__all__ = [
    "CrossLayerSource",
    "CrossLayerTranscoder",
    "Dictionary",
    "DictionaryConfig",
    "DictionarySet",
    "Hook",
    "describe",
    "detect",
    "load_dictionary",
    "save_saelens",
]

lazy_package(__name__)
