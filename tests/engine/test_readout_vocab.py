"""Logits of a few vocabulary columns (``Engine.run(vocab=ids)``) equal those columns of the
whole readout, and the head's product with the whole unembedding is never made.

Reference: the same pass without ``vocab`` (the model's own head, or the fp32 readout of a
low-precision model), its columns selected afterwards. Families: every causal card's tiny
model and the real stories260K, up to rounding at their depth.
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Read, Site
from mechscope.engine.interventions.prefix import Resume
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

SEQ = 10


def _ids(lm, batch: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, SEQ), generator=gen)


def _vocab(lm) -> torch.Tensor:
    return torch.tensor([lm.vocab_size - 1, 0, 17, 5])  # unsorted, both ends


def _head_calls(lm) -> tuple[list[int], object]:
    calls: list[int] = []
    head = lm.unembed_modules()[-1]
    return calls, head.register_forward_hook(lambda m, a, o: calls.append(1))


def test_vocab_columns_equal_the_whole_readout_and_skip_the_head(causal_model):
    lm, eng = causal_model
    ids, vocab = _ids(lm), _vocab(lm)
    whole = eng.run(ids, logits=torch.tensor([2, SEQ - 1])).logits  # [2, 2, vocab]
    calls, handle = _head_calls(lm)
    try:
        got = eng.run(ids, logits=torch.tensor([2, SEQ - 1]), vocab=vocab).logits
    finally:
        handle.remove()
    assert got.shape == (2, 2, len(vocab)) and got.dtype == torch.float32
    assert not calls  # the whole unembedding never ran: not one path compared with itself
    assert_rounding_close(got, whole[..., vocab], depth=depth_of(lm), msg="vocab columns")


def test_vocab_columns_of_every_position(causal_model):
    lm, eng = causal_model
    ids, vocab = _ids(lm, batch=1), _vocab(lm)
    whole = eng.run(ids).logits  # [1, SEQ, vocab]
    got = eng.run(ids, vocab=vocab).logits
    assert_rounding_close(got, whole[..., vocab], depth=depth_of(lm), msg="every position")


@pytest.mark.parametrize("spec", ["tiny:llama", "tiny:gemma2"])
def test_vocab_columns_in_bf16_are_the_fp32_readout(spec):
    """A bf16 model's columns are the fp32 readout's (logit soft-cap included: Gemma 2)."""
    lm = load_model(spec, dtype="bfloat16")
    eng = Engine.of(lm)
    ids, vocab = _ids(lm), _vocab(lm)
    whole = eng.run(ids, logits=1).logits
    got = eng.run(ids, logits=1, vocab=vocab).logits
    assert got.dtype == torch.float32
    assert_rounding_close(got, whole[..., vocab], depth=depth_of(lm), msg=spec)


def test_vocab_columns_of_a_resumed_pass():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    ids, vocab = _ids(lm, batch=1), _vocab(lm)
    cache = eng.run(ids, cache=True).cache
    whole = eng.run(ids, logits=1).logits
    got = eng.run(ids, logits=1, vocab=vocab, resume=Resume(cache, 6)).logits
    assert_rounding_close(got, whole[..., vocab], depth=depth_of(lm), msg="resumed")


def test_bad_vocab_is_refused_in_one_line():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    ids = _ids(lm, batch=1)
    for bad in (torch.tensor([[1, 2]]), torch.tensor([1.0]), torch.tensor([], dtype=torch.long)):
        with pytest.raises(ValueError, match="vocab: expected a non-empty 1-D tensor"):
            eng.run(ids, vocab=bad)
    with pytest.raises(ValueError, match=f"vocab: token ids must lie in 0..{lm.vocab_size - 1}"):
        eng.run(ids, vocab=torch.tensor([lm.vocab_size]))
    with pytest.raises(UnsupportedInterventionError, match="cannot also read the logits"):
        eng.run(ids, [Read(Site("logits"))], vocab=torch.tensor([1]))


@pytest.mark.parametrize("spec", ["tiny:modernbert", "tiny:llada"])
def test_vocab_columns_of_bidirectional_models(spec):
    """Models without ``logits_to_keep`` (ModernBERT's masked-LM head runs a dense layer and
    a norm before its decoder) select positions after the readout: the same columns."""
    lm = load_model(spec)
    eng = Engine.of(lm)
    ids, vocab = _ids(lm), _vocab(lm)
    for logits in (True, torch.tensor([2, SEQ - 1]), 1):
        whole = eng.run(ids, logits=logits).logits
        got = eng.run(ids, logits=logits, vocab=vocab).logits
        assert got.shape == (*whole.shape[:2], len(vocab))
        assert_rounding_close(got, whole[..., vocab], depth=depth_of(lm), msg=f"{logits}")
