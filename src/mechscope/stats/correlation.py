"""Agreement between score vectors: correlations, cosine, and split-half reliability.

Attribution and consistency results are compared as vectors (one score per head, per layer,
per item): "does IG on 1 prompt rank heads like IG on 50 prompts?", "does the student's
effect vector follow the teacher's?". Pearson and Spearman come from :mod:`scipy.stats`;
the pairwise matrix is a vectorised Pearson (one matrix product instead of n² calls).
Constant vectors have no defined correlation and give NaN, which the summaries skip. A
vector holding NaN or an infinity is refused in one line (:class:`~mechscope.errors.
NonFiniteError`): a correlation is never computed from a non-finite score; split-half
reliability alone reads NaN as an item missing from a trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats._checks import as_float_array, check_positive_int


@dataclass(frozen=True)
class SplitHalf:
    """Split-half reliability of a mean profile.

    ``reliability`` is the Spearman–Brown corrected value ``2 r / (1 + r)`` of ``mean_r``,
    the mean Pearson correlation between the two half-means over ``split_r`` (one per
    random split).
    """

    reliability: float
    mean_r: float
    split_r: np.ndarray  # [n_splits]


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two equal-length vectors (NaN if either is constant)."""
    a, b = _pair(x, y)
    if _constant(a) or _constant(b):
        return float("nan")
    return float(stats.pearsonr(a, b).statistic)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation: agreement in *ordering*, robust to a few huge scores."""
    a, b = _pair(x, y)
    if _constant(a) or _constant(b):
        return float("nan")
    return float(stats.spearmanr(a, b).statistic)


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    """Cosine similarity; unlike Pearson it does not centre, so a shared offset counts."""
    a, b = _pair(x, y)
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom > 0 else float("nan")


def pairwise_pearson_matrix(X: np.ndarray) -> np.ndarray:
    """Pearson correlation between every pair of rows of ``X [n, d]`` -> ``[n, n]``.

    Rows are centred and scaled to unit norm, then correlated with one matrix product.
    Rows that are constant get NaN rows and columns; values are clipped to ``[-1, 1]``
    and the diagonal of non-constant rows is exactly 1.
    """
    x = as_float_array(X, field="X", ndim=2, nan="refused")  # [n, d]
    if x.shape[1] < 2:
        raise InputError(f"expected at least 2 columns, got {x.shape[1]}", field="X")
    centred = x - x.mean(axis=1, keepdims=True)  # [n, d]
    norms = np.linalg.norm(centred, axis=1)  # [n]
    scale = np.max(np.abs(x), axis=1)
    constant = norms <= 1e-12 * np.maximum(scale, 1.0) * np.sqrt(x.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = centred / norms[:, None]
    unit[constant] = np.nan
    m = np.clip(unit @ unit.T, -1.0, 1.0)  # [n, n]
    np.fill_diagonal(m, np.where(constant, np.nan, 1.0))
    return m


def summary_offdiag(M: np.ndarray) -> tuple[float, float, float]:
    """``(mean, min, max)`` of the off-diagonal entries of a square matrix, NaN skipped.

    The diagonal of a similarity matrix is trivially 1 and would inflate the mean.
    All-NaN input gives ``(nan, nan, nan)``.
    """
    m = as_float_array(M, field="M", ndim=2)
    if m.shape[0] != m.shape[1] or m.shape[0] < 2:
        raise InputError(f"expected a square matrix of size >= 2, got {m.shape}", field="M")
    off = m[~np.eye(m.shape[0], dtype=bool)]
    off = off[~np.isnan(off)]
    if off.size == 0:
        return float("nan"), float("nan"), float("nan")
    return float(off.mean()), float(off.min()), float(off.max())


def split_half_reliability(X: np.ndarray, n_splits: int = 100, seed: int = 0) -> SplitHalf:
    """How reproducible is the mean profile of ``X [n_traces, n_items]``?

    Traces (samples, prompts, rollouts) are randomly split in two halves ``n_splits``
    times; for each split the per-item means of the halves are correlated (Pearson over
    items, skipping items missing in either half). The mean correlation describes a profile
    built from *half* the traces, so the Spearman–Brown formula ``2 r / (1 + r)`` projects
    it to the full set. A value near 1 says more traces would not change the profile.
    """
    x = as_float_array(X, field="X", ndim=2)  # [n_traces, n_items]
    check_positive_int(n_splits, field="n_splits")
    if x.shape[0] < 2 or x.shape[1] < 3:
        raise InputError(f"expected at least 2 traces and 3 items, got {x.shape}", field="X")
    rng = np.random.default_rng(seed)
    half = x.shape[0] // 2
    rs = np.empty(n_splits)
    for i in range(n_splits):
        order = rng.permutation(x.shape[0])
        a = _nanmean_rows(x[order[:half]])  # [n_items]
        b = _nanmean_rows(x[order[half:]])
        ok = ~(np.isnan(a) | np.isnan(b))
        rs[i] = pearson(a[ok], b[ok]) if ok.sum() >= 2 else np.nan
    mean_r = float(np.nanmean(rs)) if np.any(~np.isnan(rs)) else float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        reliability = float(2.0 * mean_r / (1.0 + mean_r))
    return SplitHalf(reliability, mean_r, rs)


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    count = np.sum(~np.isnan(x), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.nansum(x, axis=0) / count, np.nan)


def _constant(a: np.ndarray) -> bool:
    return bool(np.all(a == a[0]))


def _pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = as_float_array(x, field="x", ndim=1, nan="refused")
    b = as_float_array(y, field="y", ndim=1, nan="refused")
    if a.shape != b.shape:
        raise InputError(f"expected the same length as x ({a.size}), got {b.size}", field="y")
    if a.size < 2:
        raise InputError(f"expected at least 2 values, got {a.size}", field="x")
    return a, b
