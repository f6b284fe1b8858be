"""HFSampler on a real tiny Llama (stories260K): batching, left padding, seeding."""

from __future__ import annotations

import pytest
import torch

from mechscope.anchors.rollouts import RolloutSettings, resample_trace
from mechscope.anchors.sampler import HFSampler, Sampler
from mechscope.anchors.trace import Trace
from mechscope.errors import InputError

PROMPTS = ["Once upon a time", "Lily had a big red ball and she", "The cat"]


@pytest.fixture(scope="module")
def tiny(stories_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(stories_path)
    return model, tokenizer


def _gen(sampler, prompts, n=1, temperature=0.0, seed=0, max_new_tokens=8):
    return sampler.generate(
        prompts, n=n, temperature=temperature, top_p=0.95, max_new_tokens=max_new_tokens, seed=seed
    )


def test_left_padded_batch_equals_one_by_one(tiny):
    """Greedy decoding: a padded batch must give exactly the unbatched continuations."""
    model, tokenizer = tiny
    batched = _gen(HFSampler(model, tokenizer, batch_size=3), PROMPTS)
    single = _gen(HFSampler(model, tokenizer, batch_size=1), PROMPTS)
    assert batched == single
    assert all(len(out) == 1 and out[0].strip() for out in batched)
    assert tokenizer.padding_side == "right" and tokenizer.pad_token is None  # restored


def test_sampling_shape_and_seeding(tiny):
    model, tokenizer = tiny
    sampler = HFSampler(model, tokenizer, batch_size=4)
    assert isinstance(sampler, Sampler)
    a = _gen(sampler, PROMPTS[:2], n=3, temperature=1.0, seed=1)
    b = _gen(sampler, PROMPTS[:2], n=3, temperature=1.0, seed=1)
    c = _gen(sampler, PROMPTS[:2], n=3, temperature=1.0, seed=2)
    assert [len(x) for x in a] == [3, 3]
    assert a == b
    assert a != c
    assert len(set(a[0])) > 1  # samples differ from each other


def test_bad_generation_arguments(tiny):
    model, tokenizer = tiny
    sampler = HFSampler(model, tokenizer)
    with pytest.raises(InputError):
        _gen(sampler, PROMPTS, n=0)
    with pytest.raises(InputError):
        _gen(sampler, [""])
    with pytest.raises(InputError):
        HFSampler(model, tokenizer, batch_size=0)


def test_end_to_end_with_tiny_model(tiny, tmp_path):
    model, tokenizer = tiny
    text = "Tell a story. <think>\nOnce upon a time there was a cat. The cat was happy.</think>"
    trace = Trace.from_text("story", text, "42")
    settings = RolloutSettings(n=2, n_forced=2, max_new_tokens=8, forced_max_new_tokens=4)
    out = resample_trace(trace, HFSampler(model, tokenizer, batch_size=2), settings=settings)
    assert sorted(out.resampled) == [0, 1, 2]
    assert all(len(v) == 2 for v in out.resampled.values())
    assert all(len(v) == 2 for v in out.forced.values())
    # a story model never answers: every rollout is kept and flagged as unanswered
    assert sum(out.n_without_answer().values()) == 6
