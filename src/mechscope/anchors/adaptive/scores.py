"""How well an estimate of a trace's chunk importances recovers the true ones, for many runs
at once (rows ``[R, C]`` of estimates against one truth ``[C]`` or one per row ``[R, C]``).

- :func:`spearman_rows`: Spearman's ρ of each row with the truth (NaN when either side is
  constant);
- :func:`top_overlap_rows`: the share of the truth's ``k`` chunks of largest ``|importance|``
  found among the row's ``k`` largest (ties go to the earlier chunk, NaN counts as 0);
- :func:`coverage_rows`: the share of chunks whose interval holds the true importance.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

TOP_K = 5


def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[None, :] if x.ndim == 1 else x


def top_mask(values: np.ndarray, k: int) -> np.ndarray:
    """``[R, C]`` bool: each row's ``k`` entries of largest ``|value|`` (stable, NaN as 0)."""
    values = _rows(values)
    k = min(k, values.shape[-1])
    order = np.argsort(-np.abs(np.nan_to_num(values)), axis=-1, kind="stable")[:, :k]
    mask = np.zeros(values.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask


def top_overlap_rows(estimate, truth, k: int = TOP_K) -> np.ndarray:
    """Share of the truth's top ``k`` in each row's top ``k``. [R]"""
    estimate, truth = _rows(estimate), _rows(truth)
    k = min(k, estimate.shape[-1])
    return (top_mask(estimate, k) & top_mask(truth, k)).sum(axis=-1) / k


def top_overlap(estimate, truth, k: int = TOP_K) -> float:
    """:func:`top_overlap_rows` of one estimate."""
    return float(top_overlap_rows(estimate, truth, k)[0])


def spearman_rows(estimate, truth) -> np.ndarray:
    """Spearman's ρ of each row with the truth (average ranks for ties). [R]"""
    estimate, truth = _rows(estimate), _rows(truth)
    re = stats.rankdata(estimate, axis=-1)
    rt = stats.rankdata(truth, axis=-1)
    re, rt = re - re.mean(-1, keepdims=True), rt - rt.mean(-1, keepdims=True)
    norm = np.sqrt((re**2).sum(-1) * (rt**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (re * rt).sum(-1) / np.where(norm > 0, norm, 1), np.nan)


def coverage_rows(low, high, truth) -> np.ndarray:
    """Share of chunks with ``low <= truth <= high`` (fp64 slack of 1e-12). [R]"""
    low, high, truth = _rows(low), _rows(high), _rows(truth)
    return ((low <= truth + 1e-12) & (truth - 1e-12 <= high)).mean(axis=-1)
