"""Proportions and paired binary outcomes: Wilson score intervals, Newcombe's interval for a
difference of two independent proportions, and the exact McNemar test.

A rate ``passed / n`` (tasks solved, checks passed) gets a Wilson score interval
(:meth:`scipy.stats.binomtest.proportion_ci`), which stays inside [0, 1] and keeps its
coverage near 0 and 1 where the normal approximation does not. Arrays of rates get the same
interval vectorised (:func:`wilson_intervals`, statsmodels' ``proportion_confint``). A
difference ``k1/n1 - k2/n2`` of two *independent* binomial proportions gets Newcombe's
hybrid score interval (:func:`difference_intervals`, Newcombe 1998, method 10, through
statsmodels' ``confint_proportions_2indep``): it combines the two Wilson intervals, stays in
[-1, 1], and holds its coverage near 0 and 1 where the Wald interval collapses to a point.
Two binary outcomes on the same items (item passes under A, under B) are compared by the
exact McNemar test: a two-sided binomial test on the discordant items.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Rate:
    """A pass rate with its Wilson interval."""

    passed: int
    n: int
    rate: float
    low: float
    high: float


def pass_rate(passed: int, n: int, confidence: float = 0.95) -> Rate:
    """``passed / n`` with a Wilson score interval (NaN for ``n == 0``)."""
    if n == 0:
        nan = float("nan")
        return Rate(0, 0, nan, nan, nan)
    ci = stats.binomtest(int(passed), int(n)).proportion_ci(
        confidence_level=confidence, method="wilson"
    )
    return Rate(int(passed), int(n), passed / n, float(ci.low), float(ci.high))


def mcnemar_exact(n10: int, n01: int) -> float:
    """Two-sided exact McNemar p-value: are the two discordant counts (``n10``: only the
    first passes, ``n01``: only the second) equally likely? (1.0 if there are none)."""
    if n10 + n01 == 0:
        return 1.0
    return float(stats.binomtest(int(n10), int(n10 + n01), 0.5).pvalue)


def _counts(k, n) -> tuple[np.ndarray, np.ndarray]:
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    if np.any(n < 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("counts with 0 <= k <= n")
    return k, n


def wilson_intervals(k, n, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score intervals of the rates ``k / n`` (arrays, broadcast); ``n == 0`` (no
    observation) gives the whole range [0, 1]."""
    from statsmodels.stats.proportion import proportion_confint

    k, n = _counts(k, n)
    some = n > 0
    low, high = np.zeros_like(n), np.ones_like(n)
    if some.any():
        lo, hi = proportion_confint(k[some], n[some], alpha=1 - confidence, method="wilson")
        low[some], high[some] = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
    return low, high


def difference_intervals(
    k1, n1, k2, n2, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``k1/n1 - k2/n2`` of two independent binomial samples, with Newcombe's hybrid score
    interval (method 10): ``low = d - sqrt((p1 - l1)^2 + (u2 - p2)^2)``, ``high = d +
    sqrt((u1 - p1)^2 + (p2 - l2)^2)`` from the Wilson intervals ``[l, u]`` of each rate.

    Returns ``(difference, low, high)``. A side with no observation (``n == 0``) has an
    undefined rate: the difference is NaN and its interval the whole range [-1, 1].
    """
    from statsmodels.stats.proportion import confint_proportions_2indep

    k1, n1 = _counts(k1, n1)
    k2, n2 = _counts(k2, n2)
    k1, n1, k2, n2 = np.broadcast_arrays(k1, n1, k2, n2)
    both = (n1 > 0) & (n2 > 0)
    diff = np.full(k1.shape, np.nan)
    low, high = np.full(k1.shape, -1.0), np.full(k1.shape, 1.0)
    if both.any():
        a, b, c, d = k1[both], n1[both], k2[both], n2[both]
        diff[both] = a / b - c / d
        lo, hi = confint_proportions_2indep(
            a, b, c, d, method="newcomb", compare="diff", alpha=1 - confidence
        )
        low[both], high[both] = np.clip(lo, -1, 1), np.clip(hi, -1, 1)
    return diff, low, high
