"""Sparse dictionaries (SAEs, transcoders) beside the model: one type, read from and written
to every published layout. They sit at the models' layer, so the engine splices them as
sites and the ``features`` workflow trains, evaluates and explains them."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig, Hook

__all__ = ["Dictionary", "DictionaryConfig", "Hook"]

lazy_package(__name__)
