"""From pass/fail to quadrants (the program that tests a completion is
:meth:`mechscope.data.code.CodeProblem.test_program`).

A task's quadrant compares its two arms: ``G11`` both pass, ``G10`` only the agentic arm
passes, ``G01`` only the assisted arm passes, ``G00`` neither. Pass rates get Wilson score
intervals and the paired difference between the arms an exact McNemar test (G10 vs G01),
both from :mod:`mechscope.stats.proportions`.
"""

from __future__ import annotations

QUADRANTS = ("G11", "G10", "G01", "G00")


def quadrant(assisted_passed: bool, agentic_passed: bool) -> str:
    """``G<agentic><assisted>``: G10 = only agentic passes, G01 = only assisted passes."""
    return f"G{int(bool(agentic_passed))}{int(bool(assisted_passed))}"
