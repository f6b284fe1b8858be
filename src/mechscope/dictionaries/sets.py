"""A set of per-layer dictionaries: circuit-tracer's transcoder sets, Gemma Scope's layers.

One :class:`~mechscope.dictionaries.Dictionary` per layer, read from one folder; indexed by
layer (``tset[6]``), iterated in layer order. Each member is spliced as its own feature
site (``Site.feature(tset[6], index)``).
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import nn

from mechscope.dictionaries.dictionary import Dictionary
from mechscope.errors import InputError


class DictionarySet(nn.Module):
    """Dictionaries by layer (``layers[i]`` is the layer of ``dictionaries[i]``)."""

    def __init__(self, dictionaries: dict[int, Dictionary], source: str) -> None:
        super().__init__()
        self.layers = sorted(dictionaries)
        self.dictionaries = nn.ModuleList([dictionaries[layer] for layer in self.layers])
        self.source = source

    def __getitem__(self, layer: int) -> Dictionary:
        if layer not in self.layers:
            raise InputError(f"a layer among {self.layers}, got {layer}", field="layer")
        return self.dictionaries[self.layers.index(layer)]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[Dictionary]:  # type: ignore[override]
        return iter(self.dictionaries)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.layers)

    def extra_repr(self) -> str:
        return f"{len(self)} layers ({self.layers[0]}..{self.layers[-1]}), from {self.source}"
