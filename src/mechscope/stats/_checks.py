"""Input checks shared by the stats modules.

Statistics are computed long after the model ran, often on arrays assembled from many
shards; a wrong shape or a label list of the wrong length would otherwise surface as a
broadcasting error deep inside numpy or scipy. These helpers turn such mistakes into one
:class:`~mechscope.errors.InputError` line naming the field and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from mechscope.errors import InputError, NonFiniteError


def as_float_array(
    values: object,
    *,
    field: str,
    ndim: int | None = None,
    min_ndim: int = 1,
    nan: Literal["missing", "refused"] = "missing",
):
    """Return ``values`` as a float64 array, checking its number of dimensions and that no
    statistic will be computed from a non-finite value.

    An infinity is always refused (:class:`~mechscope.errors.NonFiniteError`, naming the
    field and index): no mean, interval, rank or correlation is defined with one. NaN
    marks a missing value (``nan="missing"``: a progress bin a short sample never reached,
    a test not run; the statistics skip it and say so) or is refused too
    (``nan="refused"``: a correlation or a winner, where skipping would change the answer).

    float64 because these are reference statistics over per-sample scalars: the arrays are
    small and the extra precision keeps bootstrap percentiles reproducible to 1e-12.
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected a numeric array ({exc})", field=field) from None
    if ndim is not None and arr.ndim != ndim:
        raise InputError(f"expected a {ndim}-d array, got shape {arr.shape}", field=field)
    if arr.ndim < min_ndim:
        raise InputError(f"expected at least {min_ndim} dimension(s), got {arr.ndim}", field=field)
    bad = np.isinf(arr) if nan == "missing" else ~np.isfinite(arr)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(arr[first]) else "infinite"
        where = f"index {first[0] if len(first) == 1 else first}" if first else "its value"
        raise NonFiniteError(
            f"field {field!r}: {where} is {kind} ({int(bad.sum())} non-finite of {arr.size}); "
            "no statistic is computed from non-finite values"
        )
    return arr


def as_labels(labels: Sequence[str], n: int, *, field: str) -> np.ndarray:
    """Return group or stratum labels as a 1-d string array of length ``n``."""
    arr = np.asarray(labels, dtype=str)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InputError(f"expected one label per sample ({n}), got shape {arr.shape}", field=field)
    return arr


def check_probability(value: float, *, field: str) -> None:
    """A level such as a confidence must lie strictly between 0 and 1."""
    if not 0.0 < float(value) < 1.0:
        raise InputError(f"expected a value strictly between 0 and 1, got {value}", field=field)


def check_positive_int(value: int, *, field: str, minimum: int = 1) -> None:
    """Counts such as ``n_resamples`` or ``n_bins`` must be integers >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(f"expected an integer >= {minimum}, got {value!r}", field=field)
