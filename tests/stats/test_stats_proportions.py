"""Pass rates with Wilson intervals and the exact McNemar test, against their formulas."""

from __future__ import annotations

import math

import pytest

from mechscope.stats import mcnemar_exact, pass_rate
from tolerance import assert_decimal, assert_fp64_close

#: Closed-form Wilson bounds against scipy's (and statsmodels'): double-precision evaluations
#: of the same formula, a few roundings of values in [0, 1] (rates, centre, half-width).
FORMULA = {"terms": 4, "scale": 1.0}


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
    assert_fp64_close(r.low, max(low, 0.0), **FORMULA, msg="low")
    assert_fp64_close(r.high, min(high, 1.0), **FORMULA, msg="high")
    assert math.isnan(pass_rate(0, 0).rate)


def test_mcnemar_is_a_two_sided_binomial_on_discordant_tasks():
    n10, n01 = 9, 2
    n = n10 + n01
    tail = sum(math.comb(n, i) for i in range(0, min(n10, n01) + 1)) / 2**n
    # scipy sums the binomial tail's n + 1 probabilities; the reference is an exact ratio.
    assert_fp64_close(mcnemar_exact(n10, n01), min(1.0, 2 * tail), terms=n + 1, scale=1.0)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # k = n / 2: scipy returns 1 without a sum


def test_wilson_intervals_equal_scipy_elementwise_and_n_zero_is_the_whole_range():
    from mechscope.stats import wilson_intervals

    k, n = [0, 3, 7, 164, 0], [10, 10, 164, 164, 0]
    low, high = wilson_intervals(k, n, confidence=0.9)
    for i in range(4):
        r = pass_rate(k[i], n[i], confidence=0.9)  # scipy's binomtest, one at a time
        assert_fp64_close(low[i], r.low, **FORMULA, msg=f"low {i}")
        assert_fp64_close(high[i], r.high, **FORMULA, msg=f"high {i}")
    assert (low[4], high[4]) == (0.0, 1.0)


#: Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10 (hybrid score),
#: 95 % limits as printed (4 decimals).
NEWCOMBE_TABLE_II = [
    ((56, 70, 48, 80), ("0.0524", "0.3339")),
    ((9, 10, 3, 10), ("0.1705", "0.8090")),
    ((0, 10, 0, 10), ("-0.2775", "0.2775")),
    ((10, 10, 0, 10), ("0.6075", "1.0000")),
]


@pytest.mark.parametrize(("counts", "printed"), NEWCOMBE_TABLE_II, ids=str)
def test_difference_intervals_reproduce_newcombes_table(counts, printed):
    from mechscope.stats import difference_intervals

    diff, low, high = difference_intervals(*counts)
    k1, n1, k2, n2 = counts
    assert float(diff) == k1 / n1 - k2 / n2  # the same two divisions and subtraction
    assert_decimal(float(low), printed[0])  # printed to 4 decimals
    assert_decimal(float(high), printed[1])


def test_difference_intervals_are_newcombes_formula_on_scipys_wilson_bounds():
    from mechscope.stats import difference_intervals

    cases = [(3, 17, 11, 20), (0, 5, 5, 5), (40, 100, 38, 90), (1, 2, 0, 0)]
    k1, n1, k2, n2 = (list(c) for c in zip(*cases, strict=True))
    diff, low, high = difference_intervals(k1, n1, k2, n2, confidence=0.99)
    for i, (a, b, c, d) in enumerate(cases[:3]):
        r1, r2 = pass_rate(a, b, 0.99), pass_rate(c, d, 0.99)
        p1, p2 = a / b, c / d
        want_low = p1 - p2 - math.hypot(p1 - r1.low, r2.high - p2)
        want_high = p1 - p2 + math.hypot(r1.high - p1, p2 - r2.low)
        assert_fp64_close(low[i], want_low, **FORMULA, msg=f"low {i}")
        assert_fp64_close(high[i], want_high, **FORMULA, msg=f"high {i}")
    assert math.isnan(diff[3]) and (low[3], high[3]) == (-1.0, 1.0)  # one side unobserved
