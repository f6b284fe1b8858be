"""Where a per-sample result stops being finite: the first layer, in one line.

A model whose weights are finite (checked at load, :mod:`mechscope.models.finite`) can
still produce NaN or infinite activations: float16 overflows past 65,504, a bfloat16 model
can overflow in a long context. Every workflow checks what it computed for a sample before
it stores it, with :func:`require_finite`, and refuses a non-finite value with a
:class:`~mechscope.errors.NonFiniteError` naming the sample and the first layer where it
appears; the aggregators check what they are given the same way, so no rate, rank,
winner, interval or correlation is ever computed from NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechscope.errors import NonFiniteError

HINT = NonFiniteError.HINT


@dataclass(frozen=True)
class Finding:
    """The first index along an axis where an array is not finite."""

    index: int  # along the axis (a layer)
    n_bad: int  # non-finite values at that index
    n_values: int  # values at that index
    kind: str  # "NaN", "infinite" or "NaN and infinite"
    names: tuple[str, ...] = ()  # the named entries (axis 0) that are bad there


def first_nonfinite(values: object, axis: int = 0, names: Sequence[str] = ()) -> Finding | None:
    """The first index along ``axis`` of ``values`` holding a NaN or infinity (None: all
    finite). With ``names`` (one per entry of axis 0, ``axis`` > 0), which entries are bad
    at that index."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "fc" or arr.size == 0:
        return None
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    if arr.ndim == 0:
        return Finding(0, 1, 1, _kind(arr[None]))
    moved = np.moveaxis(bad, axis, 0)  # [index, ...]
    per = moved.reshape(moved.shape[0], -1)
    index = int(np.argmax(per.any(axis=1)))
    at = np.moveaxis(arr, axis, 0)[index]
    bad_names: tuple[str, ...] = ()
    if names and axis > 0:
        rows = np.moveaxis(bad, axis, 1)[:, index].reshape(len(names), -1).any(axis=1)
        bad_names = tuple(n for n, b in zip(names, rows, strict=True) if b)
    return Finding(index, int(per[index].sum()), int(per[index].size), _kind(at), bad_names)


def _kind(values: np.ndarray) -> str:
    nan, inf = bool(np.isnan(values).any()), bool(np.isinf(values).any())
    return "NaN and infinite" if nan and inf else "NaN" if nan else "infinite"


def require_finite(
    values: object,
    what: str,
    *,
    sample: str | None = None,
    layer_axis: int | None = 0,
    names: Sequence[str] = (),
    layers: Sequence[int] | None = None,
    hint: str = HINT,
) -> None:
    """Raise :class:`NonFiniteError` if ``values`` holds a NaN or infinity, naming ``sample``
    and the first layer along ``layer_axis`` (None: the values have no layer axis) and
    how many values there are affected. ``names``: see :func:`first_nonfinite`; they
    replace ``what`` in the message when given. ``layers``: the model layer of each index
    along ``layer_axis`` (a sweep of some layers only); default: the index itself."""
    if layer_axis is None:  # counts over all values
        found = first_nonfinite(np.ravel(np.asarray(values))[None], 0)
    else:
        found = first_nonfinite(values, layer_axis, names)
    if found is None:
        return
    label = ", ".join(found.names) if found.names else what
    raise NonFiniteError(
        f"{label} is {found.kind} at {found.n_bad} of {found.n_values} value(s); {hint}",
        sample=sample,
        layer=None if layer_axis is None else (layers or range(found.index + 1))[found.index],
    )
