"""From completions to pass/fail, quadrants and pass rates with confidence intervals.

The program that tests a completion is HumanEval's: the task's ``prompt``, the completion,
the task's ``test`` and ``check(entry_point)``. With the ``"code"`` generation prompt the
completion is a whole function that redefines the prompt's stub, so the prompt's imports
and helper functions stay available to it.

A task's quadrant compares its two arms: ``G11`` both pass, ``G10`` only the agentic arm
passes, ``G01`` only the assisted arm passes, ``G00`` neither. Pass rates get Wilson score
intervals (:meth:`scipy.stats.binomtest.proportion_ci`); the paired difference between the
arms gets an exact McNemar test (a binomial test on the discordant tasks, G10 vs G01).
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy import stats

QUADRANTS = ("G11", "G10", "G01", "G00")


def check_program(problem: dict, completion: str, gen_prefix: str) -> str:
    """The Python source that runs ``problem``'s tests on ``completion``."""
    joint = "\n" if gen_prefix == "code" else ""
    return (
        problem["prompt"]
        + joint
        + completion
        + "\n\n"
        + problem["test"]
        + f"\n\ncheck({problem['entry_point']})\n"
    )


def quadrant(assisted_passed: bool, agentic_passed: bool) -> str:
    """``G<agentic><assisted>``: G10 = only agentic passes, G01 = only assisted passes."""
    return f"G{int(bool(agentic_passed))}{int(bool(assisted_passed))}"


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
    """Two-sided exact McNemar p-value: are G10 and G01 equally likely? (1.0 if none)."""
    if n10 + n01 == 0:
        return 1.0
    return float(stats.binomtest(int(n10), int(n10 + n01), 0.5).pvalue)
