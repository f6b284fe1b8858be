"""Features: sparse dictionaries (SAEs, transcoders) read from every published layout,
spliced into the engine's pass as sites, evaluated, trained and explained."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.features.dictionary import Dictionary, DictionaryConfig, Hook

__all__ = ["Dictionary", "DictionaryConfig", "Hook"]

lazy_package(__name__)
