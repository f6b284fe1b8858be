"""Quadrants, pass rates with Wilson intervals, McNemar's test, the HumanEval check program."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from study_helpers import mini_problems

from mechscope.studies.humaneval.outcomes import (
    QUADRANTS,
    check_program,
    mcnemar_exact,
    pass_rate,
    quadrant,
)
from mechscope.studies.humaneval.tables import pass_rate_frame, quadrant_frames
from mechscope.studies.sandbox import run_program

#: Closed-form Wilson bounds against scipy's: both are double-precision evaluations.
ATOL = 1e-12


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval written out from its formula."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_quadrant_names_the_agentic_arm_first():
    assert quadrant(assisted_passed=True, agentic_passed=True) == "G11"
    assert quadrant(assisted_passed=False, agentic_passed=True) == "G10"
    assert quadrant(assisted_passed=True, agentic_passed=False) == "G01"
    assert quadrant(assisted_passed=False, agentic_passed=False) == "G00"


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


def test_quadrant_and_rate_tables_count_what_they_should():
    rng = np.random.default_rng(0)
    tasks = [f"T{i}" for i in range(40)]
    passed = {arm: rng.random(40) < p for arm, p in (("assisted", 0.4), ("tests", 0.5))}
    outcomes = pd.DataFrame(
        [
            {"task": t, "arm": arm, "passed": bool(passed[arm][i])}
            for arm in passed
            for i, t in enumerate(tasks)
        ]
    )
    groups, counts = quadrant_frames(outcomes, ["tests"])
    a, g = passed["assisted"], passed["tests"]
    expected = {"G11": a & g, "G10": g & ~a, "G01": a & ~g, "G00": ~a & ~g}
    row = counts.iloc[0]
    for q in QUADRANTS:
        assert row[q] == int(expected[q].sum())
        assert set(groups[groups.quadrant == q].task) == {
            t for t, e in zip(tasks, expected[q], strict=True) if e
        }
    rates = pass_rate_frame(outcomes, 0.95).set_index("arm")
    assert rates.loc["tests", "passed"] == int(g.sum()) and rates.loc["tests", "n"] == 40


def test_check_program_runs_the_tests_on_the_completion():
    p = mini_problems()["Mini/2"]
    assert run_program(check_program(p, p["canonical_solution"], "prompt")).passed
    whole = "def first(xs):\n" + p["canonical_solution"]
    assert run_program(check_program(p, whole, "code")).passed  # redefines the stub
    wrong = run_program(check_program(p, "    return xs[-1]\n", "prompt"))
    assert not wrong.passed and wrong.reason == "assertion"
    stub_only = run_program(check_program(p, "", "code"))
    assert not stub_only.passed  # the docstring stub returns None
