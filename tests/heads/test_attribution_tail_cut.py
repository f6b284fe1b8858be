"""A gate function runs its sample only up to the last position it reads (causal models).

Every check compares the cut pass against the same gate function made to run the whole
sample: values and gradients at random gates, a completion followed by unscored tokens,
negative positions, and a bidirectional model, which must not be cut.
"""

from __future__ import annotations

import pytest
import torch
from attribution_helpers import COMPLETION, PROMPT

from mechscope.heads.diffusion import MaskedDiffusionLoss
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.objectives import CompletionNLL, nll_objective
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of


def uncut(lm, objective) -> GateFunction:
    """The same gate function, made to run every token of the sample."""
    f = GateFunction(lm, objective)
    f.input_ids = objective.input_ids
    return f


def values_and_gradients(f: GateFunction, alpha: torch.Tensor):
    leaf = alpha.clone().requires_grad_(True)  # [n, L, H]
    y = f(leaf)  # [n]
    (g,) = torch.autograd.grad(y.sum(), leaf)  # [n, L, H]
    return y.detach(), g


def random_gates(shape, n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand((n, *shape), generator=torch.Generator().manual_seed(seed))


def assert_same_function(
    cut: GateFunction, full: GateFunction, msg: str, dtype: torch.dtype = torch.float32
) -> None:
    alpha = random_gates(cut.shape, 4)
    y_cut, g_cut = values_and_gradients(cut, alpha)
    y_full, g_full = values_and_gradients(full, alpha)
    depth = depth_of(cut.lm)
    assert_rounding_close(y_cut, y_full, depth=depth, dtype=dtype, msg=f"{msg}: values")
    assert_rounding_close(g_cut, g_full, depth=depth, dtype=dtype, msg=f"{msg}: gradients")


def trailing_objective(lm) -> CompletionNLL:
    """Tokens 9..12 of 18 scored: the cut keeps 12."""
    ids = (torch.arange(18).reshape(1, -1) * 7 + 3) % lm.vocab_size  # [1, 18]
    mask = torch.zeros(18, dtype=torch.bool)
    mask[9:13] = True
    return CompletionNLL.from_mask(ids, mask, "s")


def test_a_completion_s_last_token_is_not_run(tiny_llama) -> None:
    obj = nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="s")
    f = GateFunction(tiny_llama, obj)
    assert torch.equal(f.input_ids, obj.input_ids[:, :-1])  # a target, never an input
    assert_same_function(f, uncut(tiny_llama, obj), "one token cut")


def test_unscored_tokens_after_the_completion_are_not_run(tiny_llama) -> None:
    ids = torch.arange(20).reshape(1, -1) + 5  # [1, 20]
    mask = torch.zeros(20, dtype=torch.bool)
    mask[8:12] = True  # tokens 8..11 scored, 12..19 trailing
    obj = CompletionNLL.from_mask(ids, mask, "s")
    f = GateFunction(tiny_llama, obj)
    assert f.input_ids.shape == (1, 11)  # positions 7..10 predict tokens 8..11
    assert_same_function(f, uncut(tiny_llama, obj), "trailing tokens cut")
    # the trailing tokens are really gone: changing one changes nothing, where changing a
    # token before the scored ones does
    other = ids.clone()
    other[0, 15] += 1
    moved = GateFunction(tiny_llama, CompletionNLL.from_mask(other, mask, "s"))
    gates = random_gates(f.shape, 2)
    with torch.no_grad():
        assert torch.equal(moved(gates), f(gates))
        other[0, 5] += 1
        changed = GateFunction(tiny_llama, CompletionNLL.from_mask(other, mask, "s"))
        assert_beyond_rounding(changed(gates), f(gates), depth=depth_of(tiny_llama))


@pytest.mark.parametrize(
    "spec",
    [
        "tiny:gpt2",  # fused qkv, learned positions
        "tiny:gemma2",  # soft-capped attention and logits
        "tiny:gemma3_text",  # sliding-window layers beside global ones
        "tiny:mixtral",  # experts
    ],
)
def test_other_families_cut_to_the_same_function(spec) -> None:
    lm = load_model(spec)
    obj = trailing_objective(lm)
    f = GateFunction(lm, obj)
    assert f.input_ids.shape == (1, 12)
    assert_same_function(f, uncut(lm, obj), spec)


def test_bf16_cuts_to_the_same_function() -> None:
    lm = load_model("tiny:llama", dtype=torch.bfloat16)
    obj = trailing_objective(lm)
    assert_same_function(GateFunction(lm, obj), uncut(lm, obj), "bf16", dtype=torch.bfloat16)


def test_negative_positions_keep_their_meaning(tiny_llama) -> None:
    ids = torch.arange(16).reshape(1, -1) + 3  # [1, 16]
    positions = torch.tensor([-6, -4])  # positions 10 and 12: the cut leaves 13 tokens
    obj = CompletionNLL("s", ids, positions, ids[0, [11, 13]])
    f = GateFunction(tiny_llama, obj)
    assert f.input_ids.shape == (1, 13)
    assert f.positions.tolist() == [10, 12]
    assert_same_function(f, uncut(tiny_llama, obj), "negative positions")


def test_a_bidirectional_model_is_never_cut(tiny_llada) -> None:
    """LLaDA's positions see the tokens after them: a masked-diffusion loss scored on
    tokens 8..11 of 20 still runs all 20."""
    lm = tiny_llada
    ids = torch.arange(20) + 5
    mask = torch.zeros(20, dtype=torch.bool)
    mask[8:12] = True
    obj = MaskedDiffusionLoss.from_mask(ids, mask, lm.mask_token_id, sample_id="d", n_draws=2)
    assert int(obj.positions.max()) == 11
    assert torch.equal(GateFunction(lm, obj).input_ids, obj.input_ids)
