"""The shared-prefix sampler gives HFSampler's texts with one prefill per prompt."""

from __future__ import annotations

import pytest

from mechscope.anchors.prefix_sampler import SharedPrefixSampler
from mechscope.anchors.sampler import HFSampler
from mechscope.errors import InputError
from mechscope.models import load_model

PROMPTS = ["Once upon a time, there was a little girl named Lily. She", "def add(a, b):"]


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


def test_greedy_equals_hf_sampler(lm):
    kw = {"n": 3, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 10, "seed": 0}
    ref = HFSampler(lm.model, lm.tokenizer, batch_size=3).generate(PROMPTS, **kw)
    got = SharedPrefixSampler(lm.model, lm.tokenizer, batch_size=2).generate(PROMPTS, **kw)
    assert got == ref


def test_seeded_sampling_matches_same_batches(lm):
    # one batch per prompt on both sides: same rows, same seeds → same draws
    kw = {"n": 4, "temperature": 0.8, "top_p": 0.95, "max_new_tokens": 10, "seed": 5}
    ref = HFSampler(lm.model, lm.tokenizer, batch_size=4).generate(PROMPTS, **kw)
    got = SharedPrefixSampler(lm.model, lm.tokenizer, batch_size=4).generate(PROMPTS, **kw)
    assert got == ref
    assert len(set(got[0])) > 1  # really sampled
    again = SharedPrefixSampler(lm.model, lm.tokenizer, batch_size=4).generate(PROMPTS, **kw)
    assert again == got


def test_checks_arguments(lm):
    with pytest.raises(InputError, match="n >= 1"):
        SharedPrefixSampler(lm.model, lm.tokenizer).generate(
            PROMPTS, n=0, temperature=0.6, top_p=0.9, max_new_tokens=4, seed=0
        )
