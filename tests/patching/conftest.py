"""Fixtures for the patching tests: a tiny Llama (random, seeded) and hand-made pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from patching_reference import ioi_like
from torch import nn

from mechscope.models import load_model

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


@pytest.fixture(scope="module")
def same_pair():
    """Same token length: only S2 differs."""
    return ioi_like("same-1", "Mary", "John", "Mary", "store")


@pytest.fixture(scope="module")
def diff_pair():
    """Different token lengths (another place word); the name spans still align."""
    return ioi_like("diff-1", "Mary", "John", "Mary", "store", corrupt_place="park")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class _Ones(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(x)


@pytest.fixture(scope="module")
def linear_lm():
    """A tiny Llama whose logits are linear in every activation.

    Norms become identities, queries are zero (attention is a uniform causal average, so
    the pattern no longer depends on the input) and the MLP gate is the constant 1 (the
    MLP becomes ``down(up(x))``). What remains is a composition of linear maps.
    """
    lm = load_model("tiny:llama", seed=3)
    model = lm.model.model
    model.norm = nn.Identity()
    with torch.no_grad():  # without norms, rescale so that effects are far above rounding
        model.embed_tokens.weight.mul_(20.0)
        lm.model.lm_head.weight.mul_(20.0)
        for block in model.layers:
            block.input_layernorm = nn.Identity()
            block.post_attention_layernorm = nn.Identity()
            block.self_attn.q_proj.weight.zero_()
            block.mlp.act_fn = _Ones()
            for lin in (
                block.self_attn.v_proj,
                block.self_attn.o_proj,
                block.mlp.up_proj,
                block.mlp.down_proj,
            ):
                lin.weight.mul_(8.0)
    return lm
