"""Multiple-comparison control for many simultaneous tests.

Sweeps test hundreds of sites at once (every layer × head, every sentence); at p < 0.05
about 5% of null sites would light up by chance. Benjamini–Hochberg controls the expected
share of false discoveries among the sites reported, which suits exploratory maps better
than Bonferroni's family-wise control. The adjustment itself is
:func:`scipy.stats.false_discovery_control`. Where a few planned contrasts are claimed one
by one, Holm's step-down controls the family-wise error instead
(``statsmodels.stats.multitest.multipletests``).
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

from mechscope.errors import InputError
from mechscope.stats._checks import as_float_array, check_probability


def bh_adjust(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values, same shape as ``pvalues``.

    All entries form one family, whatever the array's shape (a ``[layers, heads]`` map is
    one family of ``layers * heads`` tests). NaN marks a test that was not run: it gets a
    NaN adjusted value and does not count towards the family size.
    """
    return _adjust(pvalues, lambda p: stats.false_discovery_control(p, method="bh"))


def holm_adjust(pvalues: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values, same shape as ``pvalues``; one family and NaN
    as in :func:`bh_adjust`."""
    return _adjust(pvalues, lambda p: multipletests(p, method="holm")[1])


def _adjust(pvalues: np.ndarray, method) -> np.ndarray:
    p = as_float_array(pvalues, field="pvalues", min_ndim=0)
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise InputError("expected p-values in [0, 1]", field="pvalues")
    out = np.full(p.shape, np.nan)
    if finite.any():
        out[finite] = method(p[finite])
    return out


def bh_reject(pvalues: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Boolean mask of tests rejected at false-discovery rate ``alpha`` (NaN -> False)."""
    check_probability(alpha, field="alpha")
    adjusted = bh_adjust(pvalues)
    return np.where(np.isnan(adjusted), False, adjusted <= alpha)
