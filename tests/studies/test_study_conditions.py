"""The study's conditions: the four tool responses, the segments, the length-matched control."""

from __future__ import annotations

import pytest
from study_helpers import mini_problems

from mechscope.data.humaneval import load_humaneval_problems
from mechscope.errors import InputError
from mechscope.lens.prepare import prepare_sample
from mechscope.studies.humaneval.conditions import (
    TASK,
    TOOL,
    VARIANTS,
    length_matched_tests,
    task_conditions,
    token_count,
)


def _tool_text(sample) -> str:
    agentic = sample.conditions["agentic"]
    seg = agentic.segments[TOOL]
    content = agentic.messages[seg.message_index]["content"]
    return content[seg.char_span[0] : seg.char_span[1]]


def test_each_variant_swaps_only_the_tool_response(tiny):
    problems = mini_problems()
    out = task_conditions(problems, list(problems), tiny.tokenizer)
    for tid, per in out.items():
        assert list(per) == list(VARIANTS)
        p = problems[tid]
        assert _tool_text(per["tests"]) == p.test
        assert _tool_text(per["spec"]) == p.prompt
        assert TOOL not in per["empty"].conditions["agentic"].segments
        assert (
            per["other_tests"].metadata["tests_from"]
            and tid not in per["other_tests"].metadata["tests_from"]
        )
        first = per["tests"]
        for sample in per.values():
            # The assisted prompt, the continuation and the tool call never change.
            assert sample.conditions["assisted"] == first.conditions["assisted"]
            assert sample.continuation == p.solution
            assert (
                sample.conditions["agentic"].messages[:2]
                == first.conditions["agentic"].messages[:2]
            )
            for cond in sample.conditions.values():
                assert TASK in cond.segments


def test_other_tests_have_the_real_tests_token_count(tiny):
    """Standalone: exactly as many tokens; in context, the segment within one token."""
    problems = load_humaneval_problems()
    ids = list(problems)[:12]
    out = task_conditions(problems, ids, tiny.tokenizer, variants=("tests", "other_tests"))
    for tid in ids:
        real, fake = out[tid]["tests"], out[tid]["other_tests"]
        n = token_count(tiny.tokenizer, problems[tid].test)
        assert token_count(tiny.tokenizer, _tool_text(fake)) == n
        assert _tool_text(fake) != problems[tid].test
        counts = [
            len(prepare_sample(s, tiny.tokenizer, ("agentic", "assisted"), max_context=None)
                .conditions["agentic"].segments[TOOL])
            for s in (real, fake)
        ]  # fmt: skip
        assert abs(counts[0] - counts[1]) <= 1, (tid, counts)


def test_other_tests_do_not_depend_on_the_selected_tasks(tiny):
    problems = load_humaneval_problems()
    few = task_conditions(
        problems, ["HumanEval/3"], tiny.tokenizer, variants=("tests", "other_tests")
    )
    many = task_conditions(
        problems, list(problems)[:5], tiny.tokenizer, variants=("tests", "other_tests")
    )
    assert _tool_text(few["HumanEval/3"]["other_tests"]) == _tool_text(
        many["HumanEval/3"]["other_tests"]
    )
    reseeded = task_conditions(
        problems, ["HumanEval/3"], tiny.tokenizer, variants=("tests", "other_tests"), seed=1
    )
    assert _tool_text(reseeded["HumanEval/3"]["other_tests"]) != _tool_text(
        few["HumanEval/3"]["other_tests"]
    )


def test_length_matching_joins_several_tasks_when_one_is_too_short(tiny):
    problems = mini_problems()
    n = 3 * max(token_count(tiny.tokenizer, p.test) for p in problems.values())
    with pytest.raises(InputError, match="reach"):
        length_matched_tests(problems, "Mini/0", n, tiny.tokenizer, seed=0)
    n = token_count(tiny.tokenizer, problems["Mini/1"].test) + 5
    text, used = length_matched_tests(problems, "Mini/0", n, tiny.tokenizer, seed=0)
    assert len(used) >= 2 and "Mini/0" not in used
    assert token_count(tiny.tokenizer, text) == n


def test_variants_are_checked(tiny):
    with pytest.raises(InputError, match="including 'tests'"):
        task_conditions(mini_problems(), ["Mini/0"], tiny.tokenizer, variants=("spec",))
    with pytest.raises(InputError, match="variants"):
        task_conditions(mini_problems(), ["Mini/0"], tiny.tokenizer, variants=("tests", "nope"))
