"""Pass rates with Wilson intervals and the exact McNemar test, against their formulas."""

from __future__ import annotations

import math

import pytest

from mechscope.stats import mcnemar_exact, pass_rate

#: Closed-form Wilson bounds against scipy's: both are double-precision evaluations.
ATOL = 1e-12


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval written out from its formula."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (7, 164), (164, 164), (1, 1)])
def test_pass_rate_has_the_wilson_interval(k, n):
    r = pass_rate(k, n)
    low, high = _wilson(k, n)
    assert r.rate == k / n and r.passed == k and r.n == n
    assert r.low == pytest.approx(max(low, 0.0), abs=ATOL)
    assert r.high == pytest.approx(min(high, 1.0), abs=ATOL)
    assert math.isnan(pass_rate(0, 0).rate)


def test_mcnemar_is_a_two_sided_binomial_on_discordant_tasks():
    n10, n01 = 9, 2
    n = n10 + n01
    tail = sum(math.comb(n, i) for i in range(0, min(n10, n01) + 1)) / 2**n
    assert mcnemar_exact(n10, n01) == pytest.approx(min(1.0, 2 * tail), abs=ATOL)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == pytest.approx(1.0)
