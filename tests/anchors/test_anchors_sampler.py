"""EngineSampler on a real tiny Llama (stories260K): greedy = transformers, seeding, shape."""

from __future__ import annotations

import pytest
import torch

from mechscope.anchors.config import RolloutSettings
from mechscope.anchors.resampling.rollouts import resample_trace
from mechscope.anchors.resampling.sampler import EngineSampler, Sampler
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError
from mechscope.models import load_model

PROMPTS = ["Once upon a time", "Lily had a big red ball and she", "The cat"]


@pytest.fixture(scope="module")
def lm(stories_path):
    return load_model(str(stories_path))


def _gen(sampler, prompts, n=1, temperature=0.0, seed=0, max_new_tokens=8):
    return sampler.generate(
        prompts, n=n, temperature=temperature, top_p=0.95, max_new_tokens=max_new_tokens, seed=seed
    )


def test_greedy_equals_transformers_generate_one_prompt_at_a_time(lm):
    """Prompts of different lengths in one batch give exactly transformers' greedy texts."""
    got = _gen(EngineSampler(lm, slots=3), PROMPTS)
    for prompt, out in zip(PROMPTS, got, strict=True):
        ids = lm.tokenizer(prompt, return_tensors="pt")["input_ids"]
        ref = lm.model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :]
        assert out == [lm.tokenizer.decode(ref, skip_special_tokens=True)]
        assert out[0].strip()


def test_sampling_shape_and_seeding(lm):
    sampler = EngineSampler(lm, slots=4)
    assert isinstance(sampler, Sampler)
    a = _gen(sampler, PROMPTS[:2], n=3, temperature=1.0, seed=1)
    b = _gen(EngineSampler(lm, slots=1), PROMPTS[:2], n=3, temperature=1.0, seed=1)
    c = _gen(sampler, PROMPTS[:2], n=3, temperature=1.0, seed=2)
    assert [len(x) for x in a] == [3, 3]
    assert a == b  # the same seed gives the same rollouts in any batch
    assert a != c
    assert len(set(a[0])) > 1  # samples differ from each other


def test_bad_generation_arguments(lm):
    sampler = EngineSampler(lm)
    with pytest.raises(InputError):
        _gen(sampler, PROMPTS, n=0)
    with pytest.raises(InputError):
        _gen(sampler, [""])
    with pytest.raises(InputError):
        EngineSampler(lm, slots=0)


def test_end_to_end_with_tiny_model(lm):
    text = "Tell a story. <think>\nOnce upon a time there was a cat. The cat was happy.</think>"
    trace = Trace.from_text("story", text, "42")
    settings = RolloutSettings(n=2, n_forced=2, max_new_tokens=8, forced_max_new_tokens=4)
    out = resample_trace(trace, EngineSampler(lm, slots=2), settings=settings)
    assert sorted(out.resampled) == [0, 1, 2]
    assert all(len(v) == 2 for v in out.resampled.values())
    assert all(len(v) == 2 for v in out.forced.values())
    # a story model never answers: every rollout is kept and flagged as unanswered
    assert sum(out.n_without_answer().values()) == 6
    assert torch.is_grad_enabled()  # generation leaves autograd as it found it


def test_later_rollouts_and_grouped_requests_are_the_same_rollouts(lm):
    """Rollouts ``first…`` of a seed are those of one bigger call; several requests sampled
    together (``generate_requests``) give each request's own rollouts."""
    from mechscope.anchors.resampling.sampler import RolloutRequest, sample_requests

    sampler = EngineSampler(lm, slots=4)
    whole = _gen(sampler, PROMPTS[:1], n=5, temperature=1.0, seed=9)[0]
    later = sampler.generate(
        PROMPTS[:1], n=3, temperature=1.0, top_p=0.95, max_new_tokens=8, seed=9, first=2
    )[0]
    assert later == whole[2:]
    requests = [RolloutRequest(PROMPTS[0], 9, 2, 3), RolloutRequest(PROMPTS[1], 4, 2)]
    together = sample_requests(sampler, requests, temperature=1.0, top_p=0.95, max_new_tokens=8)
    assert together[0] == whole[3:5]
    assert together[1] == _gen(sampler, PROMPTS[1:2], n=2, temperature=1.0, seed=4)[0]
    assert sample_requests(sampler, [], temperature=1.0, top_p=0.95, max_new_tokens=8) == []
