"""Steering with a dictionary's feature: the dictionary of a run loaded and checked, its
feature's decoder row the sweep's direction, or the feature clamped to each ``α``
(:mod:`mechscope.engine.interventions.feature_edits`: raising a feature by ``α`` adds ``α``
times its decoder row at the site it writes; ``normalize`` makes ``α`` a length instead;
a clamp splices ``Site.feature`` with its error term, so only that feature's contribution
changes, and ``α = 0`` turns it off).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.steering.config import SteerConfig


@cache
def _load(path: str) -> Any:
    from mechscope.dictionaries import load_dictionary

    return load_dictionary(path)


def steer_dictionary(lm: LoadedModel, config: SteerConfig, dictionary: Any = None) -> Any:
    """The single-layer dictionary whose feature ``config`` steers: ``dictionary``, or the
    one in ``config.dictionary``'s folder (a set or cross-layer transcoder: the member at
    ``config.layer``), on the model's device."""
    from mechscope.dictionaries import CrossLayerTranscoder, DictionarySet

    loaded = dictionary
    if loaded is None:
        if config.dictionary is None:
            raise InputError(
                "a dictionary for feature=…: its folder (--dictionary DIR) or the loaded "
                "object (steer_sweep(..., dictionary=d))",
                field="dictionary",
            )
        loaded = _load(config.dictionary)
    if isinstance(loaded, DictionarySet | CrossLayerTranscoder):
        if "layer" not in config.model_fields_set:
            raise InputError(
                "a layer to take from the dictionary set (--layer L), got none", field="layer"
            )
        lm.check_layer(config.layer)
        is_set = isinstance(loaded, DictionarySet)
        loaded = loaded[config.layer] if is_set else loaded.source(config.layer)
    module = getattr(loaded, "clt", loaded)
    first = next(module.parameters(), None) if isinstance(module, torch.nn.Module) else None
    if first is not None and first.device != lm.device:
        module.to(lm.device)
    n = loaded.d_sae
    if not 0 <= int(config.feature or 0) < n:  # type: ignore[arg-type]
        raise InputError(f"a feature in 0..{n - 1}, got {config.feature}", field="feature")
    return loaded
