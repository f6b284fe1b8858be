"""Run every completion's tests in the sandbox: one shard per task.

A task's shard keeps, per arm, the exact program that was run (prompt, completion, tests),
whether it passed, why not (assertion, crash, syntax error, timeout ...), the exception and
the tail of its stderr. The canonical solution is run through the same sandbox and
recorded as arm ``canonical``: it must pass, and the report counts how often it does, so a
sandbox that is too strict (time or memory) shows up at once instead of as low pass rates.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from mechscope.data.code import CodeProblem
from mechscope.studies.sandbox import Limits, run_program

CANONICAL = "canonical"


def execute_task(
    payload: Mapping, problem: CodeProblem, gen_prefix: str, limits: Limits, jobs: int = 1
) -> dict:
    """Test every arm's completion (and the canonical solution) of one task. With the
    ``"code"`` generation prompt a completion is a whole function that redefines the stub."""
    redefines = gen_prefix == "code"
    programs = {
        arm: problem.test_program(payload["completions"][arm], redefines=redefines)
        for arm in payload["arms"]
    }
    programs[CANONICAL] = problem.test_program(problem.solution, redefines=False)
    names = list(programs)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda a: run_program(programs[a], limits), names))
    return {
        "task_id": payload["task_id"],
        "programs": programs,
        "results": {a: r.to_dict() for a, r in zip(names, results, strict=True)},
    }
