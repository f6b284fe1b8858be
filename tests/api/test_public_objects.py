"""Every public result and object, built on a tiny model: one array type (torch tensors, CPU
unless the object says otherwise: a cache stays where it was read) in every field and from
every array method, and a ``repr`` of a few lines. The workflows' results are walked by
tests/runs/test_result_contract.py (each built there, checked as computed and reopened)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from result_checks import assert_short_repr, assert_tensor, assert_tensors

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def tiny():
    from mechscope import load_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny:llama")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pair():
    from mechscope import ContrastivePair

    return ContrastivePair("p0", "ioi", CLEAN, CORRUPT, " Mary", " John")


@pytest.fixture(scope="module")
def cache(tiny):
    return tiny.run_with_cache([CLEAN, "Once upon a time"])


def test_the_cache_and_its_decompositions_give_tensors(tiny, cache):
    assert_tensors(cache.reads, "Cache.reads")
    for name, value in {
        "cache[...]": cache["z", 1],
        "logits": cache.logits,
        "final_scale()": cache.final_scale(),
    }.items():
        assert_tensor(value, name)
    stacks = {
        "accumulated_resid": cache.accumulated_resid(apply_norm="frozen"),
        "decompose_resid": cache.decompose_resid(),
        "stack_head_results": cache.stack_head_results(),
    }
    for name, parts in stacks.items():
        assert_tensors(parts, name)
        assert_tensor(parts.total(), f"{name}.total()")
        assert_tensor(parts[parts.labels[0]], f"{name}[label]")
    assert_tensor(stacks["accumulated_resid"].logit_diff(tiny, " Mary", " John"), "logit_diff")
    dla = cache.logit_attribution(" Mary", " John")
    assert_tensors(dla, "LogitAttribution")
    assert_tensor(dla.total(), "LogitAttribution.total()")
    assert all(v.device.type == "cpu" for v in (dla.heads, dla.total()))


def test_the_engines_outputs_give_tensors(tiny):
    from mechscope import Engine, Read, Site, to_tokens

    tokens = to_tokens(tiny, [CLEAN, "Once upon a time"])
    out = Engine.of(tiny).run(tokens.ids, [Read(Site("z", 1))], cache=True, **_mask(tokens))
    assert_tensors(tokens, "Tokens")
    assert_tensors(out, "RunOutput")


def _mask(tokens) -> dict:
    return {"attention_mask": tokens.attention_mask, "position_ids": tokens.position_ids}


def test_the_sweeps_array_methods_give_tensors(tiny, pair):
    from mechscope import PatchSpec, SteerConfig, SteerPrompt, patch_pairs, path_patch, steer_sweep

    spec = PatchSpec(site="z", layers=(0, 1), attribution=True)
    patched = patch_pairs(tiny, [pair], spec, progress=False)
    assert_tensors(patched)
    assert_tensor(patched.stack("logit_diff", "denoising"), "PatchingResult.stack")
    assert_tensor(patched.stack("attribution", "denoising"), "PatchingResult.stack")
    assert_tensor(patched.pairs[0].exact_change("logit_diff"), "PairResult.exact_change")
    top = patched.stack("logit_diff", "denoising").flatten().topk(3)  # what crashed on numpy
    assert top.values.shape == (3,)
    paths = path_patch(tiny, [pair], [(0, 0), (0, 1)], [(1, 0)], "q", progress=False)
    assert_tensors(paths)
    assert_tensor(paths.path_effect(), "PathResult.path_effect")
    assert_tensor(paths.mean_effect(), "PathResult.mean_effect")
    prompts = [SteerPrompt("s0", CLEAN, " Mary", " John")]
    config = SteerConfig(layer=1, alphas=(-1.0, 1.0), max_new_tokens=0)
    steered = steer_sweep(tiny, torch.ones(tiny.d_model), prompts, config, progress=False)
    assert_tensors(steered)
    assert_tensor(steered.change("logit_diff"), "SteeringResult.change")


def test_arrays_given_to_a_result_become_tensors_and_payloads_numpy():
    """A result built from numpy (a workflow's arithmetic, ``from_payload``) holds tensors
    sharing the arrays' memory; its payload, what goes to disk, is numpy again."""
    from mechscope.lens.result import SampleDiff

    metrics = np.arange(6 * 2 * 3, dtype=np.float32).reshape(6, 2, 3)
    sample = SampleDiff(
        "s0", None, ("a", "b"), "x y z", ["x", " y", " z"], np.array([[0, 1], [1, 3], [3, 5]]),
        np.array([True, True, False]), ["name"] * 3, metrics, {"a": np.ones((2, 1, 3, 2))},
    )  # fmt: skip
    assert_tensors(sample)
    assert_tensor(sample.metric("dnll"), "SampleDiff.metric")
    metrics[2, 0, 0] = -1.0
    assert float(sample.metric("dnll")[0, 0]) == -1.0  # the same memory, not a copy
    payload = sample.to_payload()
    assert all(type(payload[k]) is np.ndarray for k in ("offsets", "semantic", "metrics"))
    assert_tensors(SampleDiff.from_payload(payload))


def test_every_public_object_prints_a_few_lines(tiny, cache, pair):
    from mechscope import (
        Ablate,
        ContrastivePair,
        Edit,
        Engine,
        Gate,
        Patch,
        PatchSpec,
        Read,
        ReduceAttention,
        Resume,
        Site,
        Steer,
        SuppressAttention,
        patch_pairs,
        path_patch,
        to_tokens,
    )

    eng = Engine.of(tiny)
    ids = to_tokens(tiny, CLEAN).ids
    out = eng.run(ids, [Read(Site("z", 1))], cache=True)
    long = ContrastivePair("long", "t", CLEAN * 40, CORRUPT * 40, " Mary", " John")
    objects = [
        tiny,
        eng,
        cache,
        cache.logit_attribution(" Mary", " John"),
        cache.decompose_resid(),
        out,
        out.cache,
        to_tokens(tiny, [CLEAN] * 64),
        Read(Site("z", 1)),
        Patch(Site("resid_pre", 1), torch.zeros(64, ids.shape[1], tiny.d_model)),
        Ablate(Site("mlp_out", 1), "mean", cache, over_positions=True),
        Gate(torch.ones(tiny.n_layers, tiny.n_heads)),
        SuppressAttention(torch.zeros(64, 2, dtype=torch.long)),
        ReduceAttention(lambda layer, p: p.sum(-1)),
        Steer(Site("resid_pre", 1), torch.ones(tiny.d_model)),
        Edit(Site("resid_pre", 1), lambda h, ctx: None),
        tiny.generate(CLEAN * 20, max_new_tokens=2),
        Resume(out.cache, 3),
        long,
        patch_pairs(tiny, [pair], PatchSpec(site="z"), progress=False),
        path_patch(tiny, [pair], progress=False),
    ]
    for obj in objects:
        assert_short_repr(obj)
    text = assert_short_repr(cache)
    assert "resid_post [2, " in text and "memory:" in text and "LlamaForCausalLM" not in text
