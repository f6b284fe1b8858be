"""A coding task with its reference solution and unit tests, and the program that grades it.

Grading lives here, next to the task, so every workflow that runs a completion's tests
builds the same program (HumanEval's): the task's ``prompt``, the completion, the task's
``test`` and ``check(entry_point)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CodeProblem:
    """A function to write, its reference solution and its unit tests: the one code-problem
    type of every workflow (attribution's HumanEval samples, the HumanEval study).

    ``prompt`` is the signature and docstring, ``solution`` the body that continues it
    (HumanEval's ``canonical_solution``), ``test`` defines ``check(candidate)`` and
    ``entry_point`` names the function ``check`` is called on.
    """

    id: str
    prompt: str
    solution: str
    test: str
    entry_point: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def test_program(self, completion: str, *, redefines: bool) -> str:
        """The Python source that runs this problem's tests on ``completion``.

        ``redefines``: the completion is a whole function that redefines the prompt's stub
        (a newline joins them, so the prompt's imports and helper functions stay available
        to it); otherwise it is the body that continues the prompt.
        """
        joint = "\n" if redefines else ""
        return (
            self.prompt
            + joint
            + completion
            + "\n\n"
            + self.test
            + f"\n\ncheck({self.entry_point})\n"
        )
