"""Quadrants, the pass-rate and quadrant tables, the HumanEval test program."""

from __future__ import annotations

import numpy as np
import pandas as pd
from study_helpers import mini_problems

from mechscope.studies.humaneval.outcomes import QUADRANTS, quadrant
from mechscope.studies.humaneval.tables import pass_rate_frame, quadrant_frames
from mechscope.studies.sandbox import run_program


def test_quadrant_names_the_agentic_arm_first():
    assert quadrant(assisted_passed=True, agentic_passed=True) == "G11"
    assert quadrant(assisted_passed=False, agentic_passed=True) == "G10"
    assert quadrant(assisted_passed=True, agentic_passed=False) == "G01"
    assert quadrant(assisted_passed=False, agentic_passed=False) == "G00"


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


def test_test_program_runs_the_tests_on_the_completion():
    p = mini_problems()["Mini/2"]
    assert run_program(p.test_program(p.solution, redefines=False)).passed
    whole = "def first(xs):\n" + p.solution
    assert run_program(p.test_program(whole, redefines=True)).passed  # redefines the stub
    wrong = run_program(p.test_program("    return xs[-1]\n", redefines=False))
    assert not wrong.passed and wrong.reason == "assertion"
    stub_only = run_program(p.test_program("", redefines=True))
    assert not stub_only.passed  # the docstring stub returns None
