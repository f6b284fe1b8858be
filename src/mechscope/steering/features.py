"""Steering with a dictionary's feature: its decoder row as the direction, or the feature
clamped.

A feature writes ``a_f · W_dec[f]`` to its output site (over the dictionary's
``input_scale``, where it scales its input), so raising it by ``α`` adds ``α`` times its
decoder row there: :func:`feature_direction` gives that row at that site, and a sweep of
``Steer(site, row, α)`` moves the site exactly as raising the feature by ``α`` would
(``normalize`` makes ``α`` a length instead). Clamping sets the feature's activation to
``α`` at every position (``Site.feature`` spliced with its error term, so only that
feature's contribution changes): ``α = 0`` turns it off.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from mechscope.engine import Edit, Site
from mechscope.engine.core.sites import LAYER_SITES
from mechscope.errors import InputError, UnsupportedInterventionError
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


def feature_direction(lm: LoadedModel, dictionary: Any, index: int) -> tuple[Site, torch.Tensor]:
    """The site feature ``index`` of ``dictionary`` writes to, and its decoder row there
    (fp32, ``[d_out]``; ``[heads, d_head]`` at ``z``): the direction that raising the
    feature by 1 adds. Refused in one line for a feature that writes to several sites (a
    cross-layer transcoder's: clamp it instead) or to a site steering cannot reach."""
    from mechscope.engine.core.feature_sites import check_fits

    check_fits(lm, dictionary)
    writes = dictionary.writes()
    if len(writes) != 1:
        raise UnsupportedInterventionError(
            f"the feature writes to {len(writes)} layers, so no one direction is its "
            "decoder's: clamp it (mode 'clamp')"
        )
    hook, w_dec = writes[0]
    if hook is None or hook.site not in LAYER_SITES or hook.layer is None:
        where = "no hook" if hook is None else repr(hook.original or hook.site)
        raise UnsupportedInterventionError(
            f"the feature writes to {where}, where a direction cannot be steered: clamp it "
            "(mode 'clamp')"
        )
    if not 0 <= index < w_dec.shape[0]:
        raise InputError(f"a feature in 0..{w_dec.shape[0] - 1}, got {index}", field="feature")
    row = w_dec[index].detach().float()  # [d_out]
    scale = dictionary.config.input_scale
    if scale is not None:
        row = row / scale
    if hook.site == "z":
        row = row.unflatten(-1, (lm.n_heads, lm.d_head))  # [heads, d_head]
    return Site(hook.site, hook.layer), row


def clamp_edit(dictionary: Any, index: int, values: torch.Tensor | float) -> Edit:
    """An ``Edit`` setting feature ``index`` to ``values`` at every position: one number,
    or ``[rows]`` (one per batch row of an ``expand`` sweep)."""

    def clamp(act: torch.Tensor, context: Any) -> torch.Tensor:  # act: [rows, seq]
        value = torch.as_tensor(values, dtype=act.dtype, device=act.device)
        return value.reshape(-1, 1).expand_as(act) if value.dim() else torch.full_like(act, value)

    return Edit(Site.feature(dictionary, index), clamp)
