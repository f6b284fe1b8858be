"""Position-matched control: left padding with explicit position ids."""

from __future__ import annotations

import pytest
import torch
from lens_helpers import reference_lens_logprobs, sample_record

from mechscope.errors import InputError
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.positions import ForwardInput, as_run, check_positions, position_matched
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample
from tolerance import (
    assert_beyond_rounding,
    assert_lens_metrics_close,
    assert_rounding_close,
    depth_of,
    logprob_scale,
)


def _prepared(lm):
    return prepare_sample(
        parse_sample(sample_record(), "t"), lm.tokenizer, ("a", "b"), max_context=lm.max_context
    )


def test_padding_aligns_continuation_position_ids(tiny, engine):
    prep = _prepared(tiny)
    ca, cb = prep.conditions["a"], prep.conditions["b"]
    assert ca.cont_start > cb.cont_start  # the chat prefix is longer
    ia, ib = position_matched(ca, cb, pad_id=0)
    pad = ca.cont_start - cb.cont_start
    assert ia.pad == 0 and ib.pad == pad
    assert ia.length == ib.length == ca.length
    assert torch.equal(ib.attention_mask[0, :pad], torch.zeros(pad, dtype=torch.long))
    assert torch.equal(ib.ids[0, pad:], torch.tensor(cb.ids))
    for t in range(prep.n_tokens):  # every continuation token: same position id in A and B
        assert ia.position_of(ca.cont_start + t) == ib.position_of(cb.cont_start + t)
    assert int(ib.position_ids[0, pad + cb.cont_start]) == ca.cont_start
    diff = analyse_sample(engine, prep, PairedOptions(position_matched=True, attention=False))
    assert diff.position_ids["a"] == diff.position_ids["b"] == ca.cont_start


def test_check_fails_loudly_when_positions_differ(tiny):
    prep = _prepared(tiny)
    ca, cb = prep.conditions["a"], prep.conditions["b"]
    with pytest.raises(InputError, match=r"sample 't'.*position_ids"):
        check_positions("t", ("a", as_run(ca), ca), ("b", as_run(cb), cb), 0)
    ia, ib = position_matched(ca, cb, pad_id=0)
    check_positions("t", ("a", ia, ca), ("b", ib, cb), 0)  # no error
    broken = ForwardInput(ib.ids, ib.attention_mask, ib.position_ids + 1, ib.pad)
    with pytest.raises(InputError):
        check_positions("t", ("a", ia, ca), ("b", broken, cb), 0)


def test_rotary_model_is_invariant_to_masked_left_padding(tiny, engine):
    """Rotary attention sees relative positions only: with pads masked, metrics agree."""
    prep = _prepared(tiny)
    as_is = analyse_sample(engine, prep, PairedOptions(attention=False))
    matched = analyse_sample(engine, prep, PairedOptions(position_matched=True, attention=False))
    top = max(reference_lens_logprobs(tiny, c.ids)[1] for c in prep.conditions.values())
    v, depth = tiny.vocab_size, depth_of(tiny)
    assert_lens_metrics_close(matched.metrics, as_is.metrics, logit_scale=top, vocab=v, depth=depth)


def test_absolute_positions_follow_explicit_position_ids():
    """GPT-2 adds absolute position embeddings: padded B equals B run at shifted positions."""
    from mechscope.engine import Engine
    from mechscope.models import load_model

    lm = load_model("tiny:gpt2")
    prep = _prepared(lm)
    eng = Engine.of(lm)
    as_is = analyse_sample(eng, prep, PairedOptions(attention=False))
    matched = analyse_sample(eng, prep, PairedOptions(position_matched=True, attention=False))
    cb, ca = prep.conditions["b"], prep.conditions["a"]
    shift = ca.cont_start - cb.cont_start
    with torch.no_grad():
        ids = torch.tensor([cb.ids])
        logits = lm.model(ids, position_ids=torch.arange(ids.shape[1])[None] + shift).logits
    lp = torch.log_softmax(logits[0].double(), -1)
    t = torch.arange(prep.n_tokens)
    want = -lp[cb.cont_start - 1 + t, torch.tensor(prep.cont_ids)].numpy()
    scale, depth = logprob_scale(float(logits.abs().max()), lm.vocab_size), depth_of(lm)
    assert_rounding_close(matched.metric("nll_b")[-1], want, depth=depth, scale=scale, msg="B")
    got, plain = matched.metric("nll_b"), as_is.metric("nll_b")
    assert_beyond_rounding(got, plain, depth=depth, scale=scale, msg="shifted positions")
