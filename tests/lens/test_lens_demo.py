"""The demo's HumanEval records: a spec segment in both conditions, boundary-safe prefixes."""

from __future__ import annotations

import pytest

from mechscope.data.humaneval import CODE_OPEN, build_humaneval_samples
from mechscope.lens.demo import demo_record, humaneval_samples
from mechscope.lens.prepare import prepare_sample


def test_demo_record_moves_the_newline_and_names_the_spec():
    raw = build_humaneval_samples(tool_role="user", limit=3)
    for record, sample in zip(raw, humaneval_samples(3), strict=True):
        # The same text is teacher-forced; only the scored part starts one character earlier.
        assert sample.continuation_prefix + sample.continuation == (
            record["continuation_prefix"] + record["continuation"]
        )
        assert sample.continuation.startswith("\n") and not sample.continuation_prefix.endswith(
            "\n"
        )
        task = record["continuation_prefix"].removeprefix(CODE_OPEN)  # signature + docstring
        for cond in sample.conditions.values():
            seg = cond.segments["spec"]
            s, e = seg.char_span
            assert cond.messages[seg.message_index]["content"][s:e] == task
        assert set(sample.conditions["agentic"].segments) == {"tool_response", "spec"}
    assert demo_record(raw[0]) == demo_record(raw[0])  # pure: the input is not changed
    assert raw[0]["continuation_prefix"].endswith("\n")


@pytest.mark.slow
def test_demo_tasks_tokenise_the_same_jointly_on_smollm2(smollm2):
    """With the newline moved, prefix + continuation tokenised as one text gives the same
    ids as the lens's separate tokenisation, for every demo task (none did before)."""
    for sample in humaneval_samples(20):
        prep = prepare_sample(
            sample, smollm2.tokenizer, ("agentic", "assisted"), max_context=smollm2.max_context
        )
        assert prep.joint_tokenization_matches, sample.id
        spec = prep.conditions["assisted"].segments["spec"]
        assert "def " in smollm2.tokenizer.decode(
            [prep.conditions["assisted"].ids[i] for i in spec]
        )
