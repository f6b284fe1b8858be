"""Small HumanEval-format problems that fit the tiny test models' 512-token context."""

from __future__ import annotations

from dataclasses import replace

from mechscope.data.code import CodeProblem


def _problem(i: int, name: str, args: str, body: str, test: str) -> CodeProblem:
    return CodeProblem(
        id=f"Mini/{i}",
        prompt=f'def {name}({args}):\n    """{name.replace("_", " ")}."""\n',
        solution=body,
        test=test,
        entry_point=name,
    )


def mini_problems() -> dict[str, CodeProblem]:
    """Four tasks with real tests: canonical solutions pass them."""
    items = [
        _problem(
            0,
            "add",
            "a, b",
            "    return a + b\n",
            "def check(f):\n    assert f(1, 2) == 3\n    assert f(0, 0) == 0\n",
        ),
        _problem(
            1,
            "double",
            "x",
            "    return 2 * x\n",
            "def check(f):\n    assert f(2) == 4\n    assert f(-1) == -2\n",
        ),
        _problem(
            2,
            "first",
            "xs",
            "    if not xs:\n        return None\n    return xs[0]\n",
            "def check(f):\n    assert f([3, 4]) == 3\n    assert f([]) is None\n",
        ),
        _problem(
            3,
            "is_even",
            "n",
            "    return n % 2 == 0\n",
            "def check(f):\n    assert f(2)\n    assert not f(3)\n",
        ),
    ]
    return {p.id: p for p in items}


def more_mini_problems(copies: int = 2) -> dict[str, CodeProblem]:
    """``copies`` × the four mini problems, under distinct task ids (``Mini/0`` …)."""
    base = list(mini_problems().values())
    out = {}
    for k in range(copies):
        for p in base:
            tid = f"Mini/{k * len(base) + int(p.id.split('/')[1])}"
            out[tid] = replace(p, id=tid)
    return out


def solution(problem: CodeProblem) -> str:
    """The canonical solution written as a whole function (the ``code`` generation mode)."""
    return problem.prompt.splitlines()[0] + "\n" + problem.solution


def wrong(problem: CodeProblem) -> str:
    """A whole function that fails the task's tests."""
    return problem.prompt.splitlines()[0] + "\n    return 'wrong'\n"
