"""Real-model check on SmolLM2-135M with a HumanEval sample (chat template, tool segment)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.data.humaneval import build_humaneval_samples
from mechscope.engine import Engine
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import LensSample
from tolerance import assert_rounding_close, depth_of, logprob_scale

pytestmark = pytest.mark.slow


def test_humaneval_sample_on_smollm2(smollm2):
    record = build_humaneval_samples(tool_role="user", limit=1)[0]
    sample = LensSample.model_validate(record)
    prep = prepare_sample(
        sample, smollm2.tokenizer, ("agentic", "assisted"), max_context=smollm2.max_context
    )
    agentic = prep.conditions["agentic"]
    seg = agentic.segments["tool_response"]
    ids = [agentic.ids[i] for i in seg]
    assert "def check(candidate)" in smollm2.tokenizer.decode(ids)
    diff = analyse_sample(Engine.of(smollm2), prep, PairedOptions())
    with torch.no_grad():
        logits = smollm2.model(torch.tensor([agentic.ids])).logits[0].double()
    lp = torch.log_softmax(logits, -1)
    t = torch.arange(prep.n_tokens)
    want = -lp[agentic.cont_start - 1 + t, torch.tensor(prep.cont_ids)].numpy()
    scale, depth = logprob_scale(float(logits.abs().max()), smollm2.vocab_size), depth_of(smollm2)
    assert_rounding_close(diff.metric("nll_a")[-1], want, depth=depth, scale=scale, msg="NLL")
    for cond, mass in diff.attention.items():  # a row's T probabilities, summed: √T stages
        keys = len(prep.conditions[cond].ids)
        assert_rounding_close(mass.sum(-1), 1.0, depth=keys, scale=1.0, msg="sum of masses")
    js = diff.metric("js")
    assert bool((js >= 0).all()) and bool((js <= np.log(2)).all())
