"""From raw attributions to head importance: orientation, sign handling, aggregation.

Raw IG attributions share the objective's units and sign: for a loss, a head that helps has
a *negative* attribution (switching it on lowers the loss). ``orient`` flips losses so that
positive always means "helps the objective"; then

- ``signed`` keeps both directions (helpful positive, harmful negative),
- ``abs`` ranks by magnitude whatever the direction,
- ``relu`` keeps only helpful contributions.

Post-processing is applied per sample, *then* samples are aggregated: the mean of absolute
values is not the absolute value of the mean, and heads that help some prompts and hurt
others must not cancel out under ``abs``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from mechscope.errors import InputError
from mechscope.stats.finite import require_finite

Mode = Literal["signed", "abs", "relu"]
MODES: tuple[str, ...] = ("signed", "abs", "relu")


def orient(attributions: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Attributions with "helps the objective" positive (losses are negated)."""
    x = np.asarray(attributions, dtype=np.float64)
    return x if higher_is_better else -x


def postprocess(attributions: np.ndarray, mode: str = "signed") -> np.ndarray:
    """``signed`` (unchanged), ``abs`` or ``relu`` applied elementwise."""
    x = np.asarray(attributions, dtype=np.float64)
    if mode == "signed":
        return x
    if mode == "abs":
        return np.abs(x)
    if mode == "relu":
        return np.maximum(x, 0.0)
    raise InputError(f"one of {', '.join(MODES)}, got {mode!r}", field="postprocess")


def aggregate(
    per_sample: np.ndarray,
    *,
    mode: str = "signed",
    how: Literal["mean", "median"] = "mean",
    higher_is_better: bool | None = None,
) -> np.ndarray:
    """Per-sample vectors ``[n, L, H]`` -> one ``[L, H]`` importance.

    With ``higher_is_better`` given, vectors are first oriented (see :func:`orient`).
    """
    x = np.asarray(per_sample, dtype=np.float64)
    if x.ndim < 2 or x.shape[0] < 1:
        raise InputError(
            f"per-sample attributions [n, ...] with n >= 1, got {x.shape}", field="attributions"
        )
    for i, row in enumerate(x):  # no ranking of heads from a NaN score
        require_finite(row, "attribution", sample=f"#{i}")
    if higher_is_better is not None:
        x = orient(x, higher_is_better)
    x = postprocess(x, mode)
    if how == "mean":
        return x.mean(axis=0)
    if how == "median":
        return np.median(x, axis=0)
    raise InputError(f"'mean' or 'median', got {how!r}", field="aggregate")
