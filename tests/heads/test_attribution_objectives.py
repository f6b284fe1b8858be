"""Objectives against plain computations: NLL, logit difference, masked-diffusion loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attribution_helpers import COMPLETION, PROMPT

from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.heads.diffusion import MaskedDiffusionLoss, diffusion_objective
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.ig import joint_ig
from mechscope.heads.objectives import CompletionNLL, logit_diff_objective, nll_objective
from tolerance import assert_rounding_close, depth_of, logprob_scale


def _plain_logits(lm, ids: torch.Tensor) -> torch.Tensor:
    Engine.of(lm)  # the attention function (bidirectional for LLaDA) is installed
    with torch.no_grad():
        return lm.model(input_ids=ids).logits.double()  # [rows, seq, vocab]


def test_nll_matches_a_plain_loop(tiny_llama) -> None:
    obj = nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="s")
    f = GateFunction(tiny_llama, obj)
    ids = obj.input_ids
    logits = _plain_logits(tiny_llama, ids)[0]
    n_prompt = ids.shape[1] - obj.targets.numel()
    want = []
    for pos in range(n_prompt, ids.shape[1]):
        lp = torch.log_softmax(logits[pos - 1], dim=-1)
        want.append(-lp[ids[0, pos]].item())
    value, acc = f.metrics(torch.ones((1, *f.shape)))
    scale = logprob_scale(float(logits.abs().max()), tiny_llama.vocab_size)  # mean of NLLs
    depth = depth_of(tiny_llama)
    assert_rounding_close(value[0], np.mean(want), depth=depth, scale=scale, msg="NLL")
    hits = [
        logits[p - 1].argmax().item() == ids[0, p].item() for p in range(n_prompt, ids.shape[1])
    ]
    # a share of the completion's tokens, averaged in fp32
    assert_rounding_close(acc[0], np.mean(hits), depth=len(hits), scale=1.0, msg="accuracy")
    with torch.no_grad():  # all gates at 1 is the unmodified model
        got = f(torch.ones((1, *f.shape))).item()
    assert_rounding_close(got, np.mean(want), depth=depth, scale=scale, msg="gates at 1")


def test_gates_scale_head_outputs(tiny_llama) -> None:
    f = GateFunction(
        tiny_llama, nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="s")
    )
    gates = torch.ones((3, *f.shape))
    gates[1] = 0.0
    gates[2, 0, 1] = 0.0
    with torch.no_grad():
        v = f(gates)
    assert v[0] != v[1] and v[0] != v[2]
    with torch.no_grad():  # rows are independent: the same gate alone gives the same value
        alone = f(gates[2:3])
    assert_rounding_close(alone, v[2:3], depth=depth_of(tiny_llama), msg="row alone")


def test_logit_difference_matches_direct_logits(tiny_llama) -> None:
    obj = logit_diff_objective(
        tiny_llama.tokenizer, PROMPT + " to", " Mary", " John", sample_id="s"
    )
    f = GateFunction(tiny_llama, obj)
    logits = _plain_logits(tiny_llama, obj.input_ids)[0, -1]
    want = (logits[obj.correct_id] - logits[obj.wrong_id]).item()
    value, acc = f.metrics(torch.ones((1, *f.shape)))
    scale = 2 * float(logits.abs().max())  # a difference of two logits
    assert_rounding_close(value[0], want, depth=depth_of(tiny_llama), scale=scale, msg="diff")
    assert acc[0] == float(want > 0)
    assert obj.higher_is_better


def test_masked_diffusion_loss_matches_a_plain_loop(tiny_llada) -> None:
    lm = tiny_llada
    obj = diffusion_objective(
        lm.tokenizer,
        lm.mask_token_id,
        PROMPT,
        COMPLETION,
        sample_id="d",
        n_draws=6,
        eps=0.05,
        seed=3,
    )
    f = GateFunction(lm, obj)
    total, weight, top = 0.0, 0.0, 0.0
    for j in range(obj.rows):
        row = obj.input_ids[j : j + 1]
        logits = _plain_logits(lm, row)[0]
        lp = torch.log_softmax(logits, dim=-1)
        k = obj.targets.numel()
        top = max(top, float(logits.abs().max()))
        for i, pos in enumerate(obj.positions.tolist()):
            if row[0, pos].item() == lm.mask_token_id:
                total += -lp[pos, obj.targets[i]].item() / obj.p[j].item() / k
                weight += 1 / obj.p[j].item() / k
    want = total / obj.rows
    value, _ = f.metrics(torch.ones((1, *f.shape)))
    # a weighted sum of NLLs: rounded at the NLLs' scale times the weights
    scale = weight / obj.rows * logprob_scale(top, lm.vocab_size)
    assert_rounding_close(value[0], want, depth=depth_of(lm), scale=scale, msg="loss")


def test_masked_diffusion_never_masks_the_prompt_and_is_seeded(tiny_llada) -> None:
    lm = tiny_llada
    ids = torch.arange(20) + 10
    mask = torch.zeros(20, dtype=torch.bool)
    mask[12:] = True
    a = MaskedDiffusionLoss.from_mask(
        ids, mask, lm.mask_token_id, sample_id="d", n_draws=50, seed=1
    )
    b = MaskedDiffusionLoss.from_mask(
        ids, mask, lm.mask_token_id, sample_id="d", n_draws=50, seed=1
    )
    c = MaskedDiffusionLoss.from_mask(
        ids, mask, lm.mask_token_id, sample_id="d", n_draws=50, seed=2
    )
    assert torch.equal(a.input_ids[:, :12], ids[:12].expand(50, -1))  # prompt intact
    assert (a.input_ids[:, 12:] == lm.mask_token_id).any()  # some completion tokens masked
    assert torch.equal(a.input_ids, b.input_ids) and not torch.equal(a.input_ids, c.input_ids)
    # p = (1 − ε) t + ε lies in [ε, 1]; the masked fraction follows p across draws
    assert a.p.min() >= 1e-3 and a.p.max() <= 1.0
    frac = a.masked.double().mean(dim=1)
    assert np.corrcoef(frac.numpy(), a.p.numpy())[0, 1] > 0.8


def test_masked_diffusion_ig_is_complete(tiny_llada) -> None:
    lm = tiny_llada
    obj = diffusion_objective(
        lm.tokenizer, lm.mask_token_id, PROMPT, COMPLETION, sample_id="d", n_draws=4, seed=0
    )
    res = joint_ig(GateFunction(lm, obj), n_steps=16)
    assert res.segments.rel_delta[0] < 0.01
    assert np.abs(res.attributions).max() > 0


@pytest.mark.parametrize(
    "make",
    [
        lambda lm: nll_objective(lm.tokenizer, PROMPT, "", sample_id="x"),
        lambda lm: CompletionNLL.from_mask(torch.arange(5), torch.zeros(5, dtype=torch.bool), "x"),
        lambda lm: CompletionNLL.from_mask(
            torch.arange(5), torch.tensor([1, 0, 0, 0, 0]).bool(), "x"
        ),
        lambda lm: MaskedDiffusionLoss.from_mask(
            torch.arange(5), torch.zeros(5, dtype=torch.bool), 3, sample_id="x"
        ),
    ],
)
def test_completion_that_selects_nothing_is_a_one_line_error(tiny_llama, make) -> None:
    with pytest.raises(InputError) as exc:
        make(tiny_llama)
    msg = str(exc.value)
    assert "sample 'x'" in msg and "field 'completion'" in msg and "\n" not in msg


def test_other_objective_errors(tiny_llama) -> None:
    with pytest.raises(InputError, match="mask token"):
        diffusion_objective(tiny_llama.tokenizer, None, PROMPT, COMPLETION, sample_id="x")
    with pytest.raises(InputError, match="first tokens differ"):
        logit_diff_objective(tiny_llama.tokenizer, PROMPT, " Mary", " Mary", sample_id="x")
    f = GateFunction(
        tiny_llama, nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="x")
    )
    with pytest.raises(InputError, match="gates of shape"):
        f(torch.ones(2, 3))
