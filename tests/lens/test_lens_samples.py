"""Rendering conditions and tokenising the continuation once."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lens_helpers import CONTINUATION, sample_record

from mechscope.errors import InputError
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import load_samples, parse_sample, render_prefix


def test_chat_segment_spans_point_at_the_message_text(tiny):
    s = parse_sample(sample_record(), "t")
    text, spans = render_prefix(s, "a", tiny.tokenizer)
    start, end = spans["tests"]
    assert text[start:end] == "assert add(1, 2) == 3"
    assert text.endswith("<|im_start|>assistant\n")  # generation prompt added
    text_b, spans_b = render_prefix(s, "b", tiny.tokenizer)
    assert text_b == "Write add.\n" and spans_b == {"spec": (0, 10)}


def test_continuation_ids_are_shared_and_follow_the_prefix(tiny):
    rec = sample_record(continuation_prefix="```python\n")
    prep = prepare_sample(
        parse_sample(rec, "t"), tiny.tokenizer, ("a", "b"), max_context=tiny.max_context
    )
    want = tiny.tokenizer(CONTINUATION, add_special_tokens=False).input_ids
    assert prep.cont_ids == want
    for cond in prep.conditions.values():
        assert cond.ids[cond.cont_start :] == want  # the same ids after every prefix
        assert cond.text.endswith("```python\n")
        prefix = tiny.tokenizer(cond.text, add_special_tokens=cond.name == "b").input_ids
        assert cond.ids[: cond.cont_start] == prefix
    assert "".join(prep.cont_texts) == CONTINUATION


def test_free_fields_become_metadata(tmp_path):
    rec = sample_record(task="HumanEval/3", metadata={"pass_a": True})
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(sample_record("s2")) + "\n")
    samples = load_samples(path)
    assert [s.id for s in samples] == ["s1", "s2"]
    assert samples[0].extra_metadata == {"task": "HumanEval/3", "pass_a": True}
    path.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(InputError, match="unique"):
        load_samples(path)


def test_boundary_merge_is_flagged_not_hidden(tiny):
    rec = sample_record(continuation="hen Mary and John went to the store")
    rec["conditions"]["b"] = {"prompt": "W"}  # "W" + "hen" is one token when joined
    prep = prepare_sample(
        parse_sample(rec, "t"), tiny.tokenizer, ("a", "b"), max_context=tiny.max_context
    )
    joint = tiny.tokenizer("When Mary and John went to the store").input_ids
    assert joint != prep.conditions["b"].ids and not prep.joint_tokenization_matches
    b = prep.conditions["b"]
    np.testing.assert_array_equal(b.ids[b.cont_start :], prep.cont_ids)
