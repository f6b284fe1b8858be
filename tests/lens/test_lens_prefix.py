"""The prompt both conditions open with runs once, and the numbers are a full forward's.

Reference: the same analysis with sharing turned off (each condition from its first token),
up to the rounding of the readout at the model's depth; attention masses (whose queries a
resumed pass counts from its start) likewise. Sharing is refused where it would not be
exact (position-matched inputs: padding and explicit positions) or would save too little.
"""

from __future__ import annotations

import pytest
from lens_helpers import sample_record

from mechscope.lens import paired, prefix
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.positions import as_run, position_matched
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample
from tolerance import assert_lens_metrics_close, assert_rounding_close, lens_logit_scale

SHARED = "You are a careful programmer. Read the request and answer with code only.\n"


@pytest.fixture(scope="module")
def prep(tiny):
    """``b``'s whole prompt opens ``a``'s (an assisted request inside an agentic one)."""
    rec = sample_record(
        conditions={
            "a": {"prompt": SHARED + "Tool output: tests passed for sub and mul.\nWrite add.\n"},
            "b": {"prompt": SHARED + "Write add.\n"},
        }
    )
    sample = parse_sample(rec, "t")
    return prepare_sample(sample, tiny.tokenizer, ("a", "b"), max_context=tiny.max_context)


def _spy(monkeypatch) -> list:
    seen: list = []

    def spy(*args):
        seen.append(prefix.shared_prefix(*args))
        return seen[-1]

    monkeypatch.setattr(paired, "shared_prefix", spy)
    return seen


@pytest.mark.parametrize("attention", [False, True])
def test_a_shared_prefix_gives_a_full_forwards_numbers(tiny, engine, prep, monkeypatch, attention):
    seen = _spy(monkeypatch)
    got = analyse_sample(engine, prep, PairedOptions(attention=attention))
    assert seen[0] is not None and seen[0].length >= prefix.MIN_SHARED  # it was shared
    monkeypatch.setattr(paired, "shared_prefix", lambda *args: None)
    want = analyse_sample(engine, prep, PairedOptions(attention=attention))
    top = max(lens_logit_scale(engine, c.ids) for c in prep.conditions.values())
    assert_lens_metrics_close(
        got.metrics, want.metrics, logit_scale=top, vocab=tiny.vocab_size, depth=tiny.n_layers
    )
    for name in ("a", "b") if attention else ():
        assert got.attention[name].shape == want.attention[name].shape
        assert_rounding_close(
            got.attention[name], want.attention[name], depth=tiny.n_layers, scale=1.0, msg=name
        )


def test_padded_inputs_are_not_shared(tiny, engine, prep):
    ca, cb = prep.conditions["a"], prep.conditions["b"]
    assert prefix.shared_prefix(engine, (ca, cb), (as_run(ca), as_run(cb))) is not None
    ia, ib = position_matched(ca, cb, tiny.tokenizer.pad_token_id or 0)
    assert prefix.shared_prefix(engine, (ca, cb), (ia, ib)) is None


def test_a_short_shared_prefix_is_not_run_apart(engine, prep, monkeypatch):
    ca, cb = prep.conditions["a"], prep.conditions["b"]
    monkeypatch.setattr(prefix, "MIN_SHARED", 10**6)
    assert prefix.shared_prefix(engine, (ca, cb), (as_run(ca), as_run(cb))) is None
