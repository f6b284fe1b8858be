"""The overview's logit lens: the last layer reproduces the model's own prediction, up to
the rounding of the logits a probability is read from (tests/tolerance.py)."""

from __future__ import annotations

import pytest
import torch

from mechscope.errors import InputError
from mechscope.models import load_model
from mechscope.overview.compute import logit_lens_last_token, probability_matrix
from tolerance import assert_rounding_close, depth_of, logprob_scale


def test_last_layer_equals_model_output() -> None:
    lm = load_model("tiny:llama")
    prompts = ["When Mary and John went", "def add(a, b):"]
    df = logit_lens_last_token(lm, prompts)
    assert len(df) == len(prompts) * lm.n_layers
    for i, prompt in enumerate(prompts):
        ids = lm.tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            logits = lm.model(ids).logits[0, -1].float()
        probs = logits.softmax(-1)
        # a probability moves by p·δ(log p): at most a log-probability's rounding
        scale, depth = logprob_scale(float(logits.abs().max()), lm.vocab_size), depth_of(lm)
        last = df[(df.prompt_id == i) & (df.layer == lm.n_layers - 1)].iloc[0]
        assert last.target_rank == 0
        assert_rounding_close(last.target_prob, probs.max(), depth=depth, scale=scale, msg="last")
        # an independent logit lens at a middle layer: hidden_states + norm + head
        with torch.no_grad():
            hs = lm.model(ids, output_hidden_states=True).hidden_states[2][0, -1]
            mid = lm.model.lm_head(lm.model.model.norm(hs)).float().softmax(-1)
        row = df[(df.prompt_id == i) & (df.layer == 1)].iloc[0]
        want = mid[int(probs.argmax())]
        assert_rounding_close(row.target_prob, want, depth=depth, scale=scale, msg="layer 1")
    z, labels, _ = probability_matrix(df)
    assert z.shape == (len(prompts), lm.n_layers) and len(labels) == len(prompts)


def test_empty_prompt_is_named() -> None:
    with pytest.raises(InputError, match="prompt-1"):
        logit_lens_last_token(load_model("tiny:llama"), ["ok", "  "])
