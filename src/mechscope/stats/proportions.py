"""Proportions and paired binary outcomes: Wilson score intervals and the exact McNemar test.

A rate ``passed / n`` (tasks solved, checks passed) gets a Wilson score interval
(:meth:`scipy.stats.binomtest.proportion_ci`), which stays inside [0, 1] and keeps its
coverage near 0 and 1 where the normal approximation does not. Two binary outcomes on the
same items (item passes under A, under B) are compared by the exact McNemar test: a
two-sided binomial test on the discordant items (pass only under A vs only under B).
"""

from __future__ import annotations

from dataclasses import dataclass

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
