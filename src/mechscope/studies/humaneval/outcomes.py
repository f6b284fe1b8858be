"""From completions to the programs that test them, and from pass/fail to quadrants.

The program that tests a completion is HumanEval's: the task's ``prompt``, the completion,
the task's ``test`` and ``check(entry_point)``. With the ``"code"`` generation prompt the
completion is a whole function that redefines the prompt's stub, so the prompt's imports
and helper functions stay available to it.

A task's quadrant compares its two arms: ``G11`` both pass, ``G10`` only the agentic arm
passes, ``G01`` only the assisted arm passes, ``G00`` neither. Pass rates get Wilson score
intervals and the paired difference between the arms an exact McNemar test (G10 vs G01),
both from :mod:`mechscope.stats.proportions`.
"""

from __future__ import annotations

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
