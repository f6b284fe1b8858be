"""Steering with a feature: its decoder row as a :class:`~mechscope.engine.Steer`
direction, or the feature clamped to a value through an :class:`~mechscope.engine.Edit`.

- :func:`feature_steer`: ``h + α · w_dec[i]`` at the site the dictionary writes, the row in
  that site's units (a dictionary trained with an input scale divides it out);
- :func:`clamp_feature`: the splice ``x + (v − f_i(x)) · w_dec[i]`` at every position (or
  those of ``positions``): the feature is set to ``v`` and everything else, the other
  features and the reconstruction error, stays as the model computed it; ``v = 0`` ablates
  the feature. For a transcoder ``f_i`` is read off the site it reads, in the same pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.dictionaries import Dictionary
from mechscope.engine import Edit, Site, Steer
from mechscope.errors import InputError
from mechscope.features.sites import Where, sites_of
from mechscope.models.loaded import LoadedModel


def decoder_row(d: Dictionary, index: int) -> torch.Tensor:
    """``[d_out]`` fp32: feature ``index``'s direction in the output site's units."""
    if not 0 <= index < d.d_sae:
        raise InputError(f"a feature in 0..{d.d_sae - 1}, got {index}", field="feature")
    return d.w_dec[index].detach().float() / (d.config.input_scale or 1.0)


def feature_steer(
    lm: LoadedModel, d: Dictionary, where: Where, index: int, alpha: float | torch.Tensor = 1.0
) -> Steer:
    """A :class:`Steer` adding ``alpha`` times feature ``index``'s decoder row."""
    _, s_out = sites_of(lm, where)
    if s_out.name == "module":
        raise InputError(f"a residual-width site to steer, got {where.site_out}", field="site")
    return Steer(s_out, decoder_row(d, index), alpha)


def clamp_feature(
    lm: LoadedModel,
    d: Dictionary,
    where: Where,
    index: int,
    value: float,
    *,
    positions: Sequence[int] | None = None,
) -> Edit:
    """An :class:`Edit` setting feature ``index`` to ``value`` (module docstring)."""
    s_in, s_out = sites_of(lm, where)
    row = decoder_row(d, index)
    read = s_in if s_in != s_out else None

    def fn(act: torch.Tensor, ctx) -> torch.Tensor:
        x = ctx[read] if read is not None else act  # [b, T, d_in]
        f_i = d.encode(x)[..., index].float()  # [b, T]
        delta = (value - f_i)[..., None] * row.to(act.device)  # [b, T, d_out]
        if positions is not None:
            keep = torch.zeros(act.shape[1], dtype=torch.bool, device=act.device)
            keep[list(positions)] = True
            delta = delta * keep[None, :, None]
        return (act.float() + delta).to(act.dtype)

    return Edit(s_out, fn, reads=[s_in] if read is not None else [])


def steer_site(lm: LoadedModel, where: Where) -> Site:
    """The engine site a feature of a dictionary at ``where`` is written to."""
    return sites_of(lm, where)[1]
