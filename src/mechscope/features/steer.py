"""Steering with a feature, from Python: its decoder row as a
:class:`~mechscope.engine.Steer` direction, or the feature clamped to a value through an
:class:`~mechscope.engine.Edit`.

Both are the engine's (:mod:`mechscope.engine.interventions.feature_edits`, which the
steering workflow's sweeps use too), on the feature site: :func:`feature_steer` adds
``α · w_dec[i]`` at the site the dictionary writes, the row in that site's units (a
dictionary trained with an input scale divides it out); :func:`clamp_feature` is
``Site.feature(d, i)`` spliced with its error term and set to ``v`` at every position (or
those of ``positions``): everything else, the other features and the reconstruction
error, stays as the model computed it, and ``v = 0`` removes exactly the feature's
decoder contribution. A transcoder's feature is read off the site it reads, in the same
pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.dictionaries import Dictionary
from mechscope.engine import Edit, Steer
from mechscope.engine.interventions.feature_edits import clamp_edit, feature_direction
from mechscope.models.loaded import LoadedModel


def decoder_row(lm: LoadedModel, d: Dictionary, index: int) -> torch.Tensor:
    """``[d_out]`` fp32: feature ``index``'s direction in the output site's units."""
    return feature_direction(lm, d, index)[1]


def feature_steer(
    lm: LoadedModel, d: Dictionary, index: int, alpha: float | torch.Tensor = 1.0
) -> Steer:
    """A :class:`Steer` adding ``alpha`` times feature ``index``'s decoder row."""
    site, row = feature_direction(lm, d, index)
    return Steer(site, row, alpha)


def clamp_feature(
    d: Dictionary, index: int, value: float, *, positions: Sequence[int] | None = None
) -> Edit:
    """An :class:`Edit` setting feature ``index`` to ``value`` (module docstring)."""
    return clamp_edit(d, index, value, positions)
