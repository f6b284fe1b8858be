"""The last layer's MLP run at the kept logits' positions only equals the whole pass.

Reference: the same pass asking for every position's logits (which never trims), the kept
positions selected afterwards; gradients through head gates likewise. Families: every
causal card's tiny model and the real stories260K, up to rounding at their depth.
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Gate, Patch, Read, Site
from mechscope.engine.interventions.trim import can_trim, kept_positions
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

SEQ = 10


def _ids(lm, batch: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, SEQ), generator=gen)


def _last_mlp_positions(lm) -> tuple[list[int], object]:
    """Records the number of positions the last MLP computes (its own output, seen before
    the trim's hook, registered later, puts it back in place)."""
    seen: list[int] = []

    def record(module, args, out):
        seen.append(int((out[0] if isinstance(out, tuple) else out).shape[1]))

    return seen, lm.layer_module(lm.n_layers - 1).mlp.register_forward_hook(record)


def test_kept_logits_equal_the_whole_pass_and_the_mlp_runs_there_only(causal_model):
    lm, eng = causal_model
    ids = _ids(lm)
    keep = torch.tensor([3, SEQ - 1])
    assert can_trim(lm, [])
    seen, handle = _last_mlp_positions(lm)
    try:
        trimmed = eng.run(ids, logits=keep).logits  # [2, 2, vocab]
        last = eng.run(ids, logits=1).logits  # [2, 1, vocab]
        assert seen == [2, 1]  # the trim was taken: not a comparison of one path with itself
        whole = eng.run(ids).logits  # [2, SEQ, vocab]: every position, never trimmed
        assert seen[-1] == SEQ
    finally:
        handle.remove()
    depth = depth_of(lm)
    assert_rounding_close(trimmed, whole[:, keep], depth=depth, msg="kept positions")
    assert_rounding_close(last, whole[:, -1:], depth=depth, msg="last position")


def test_gradients_through_gates_equal_the_whole_pass(causal_model):
    lm, eng = causal_model
    ids = _ids(lm, batch=1)

    def grad(logits) -> torch.Tensor:
        alpha = torch.full((lm.n_layers, lm.n_heads), 0.7, requires_grad=True)
        out = eng.run(ids, [Gate(alpha)], logits=logits, grad=True).logits
        (out[:, -1].log_softmax(-1)[:, 5].sum()).backward()
        return alpha.grad

    assert_rounding_close(grad(1), grad(True), depth=depth_of(lm), msg="gate gradients")


def test_a_pass_that_reads_after_the_last_mlp_is_not_trimmed(stories_path):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    ids = _ids(lm)
    last = lm.n_layers - 1
    post = Site("resid_post", last)
    assert not can_trim(lm, [Read(post)])
    assert not can_trim(lm, [Read(Site("mlp_out", last))])
    assert can_trim(lm, [Read(Site("resid_pre", last)), Read(Site("resid_post", last - 1))])
    value = torch.zeros(1, SEQ, lm.d_model)
    assert can_trim(lm, [Patch(Site("resid_pre", last), value)])
    seen, handle = _last_mlp_positions(lm)
    try:
        read = eng.run(ids, [Read(post)], logits=1)[post]
    finally:
        handle.remove()
    assert seen == [SEQ]
    whole = eng.run(ids, [Read(post)])[post]
    assert torch.equal(read, whole)  # the same pass: every position's value is real


def test_kept_positions():
    assert kept_positions(True, 5) is None
    assert kept_positions(False, 5) is None
    assert kept_positions(5, 5) is None  # every position: nothing to trim
    assert kept_positions(2, 5).tolist() == [3, 4]
    assert kept_positions(torch.tensor([-1, 1, 4]), 5).tolist() == [1, 4]
    assert kept_positions(torch.arange(5), 5) is None


@pytest.mark.parametrize("spec", ["tiny:phi3", "tiny:falcon", "tiny:gptj"])
def test_derived_families_trim_exactly(spec):
    """Families the cards do not list (a fused gate/up MLP, parallel attention and MLP
    blocks) trim too, with the same kept logits as the whole pass."""
    lm = load_model(spec)
    eng = Engine.of(lm)
    ids = _ids(lm)
    keep = torch.tensor([3, SEQ - 1])
    seen, handle = _last_mlp_positions(lm)
    try:
        trimmed = eng.run(ids, logits=keep).logits
        whole = eng.run(ids).logits[:, keep]
    finally:
        handle.remove()
    assert seen == [2, SEQ]
    assert_rounding_close(trimmed, whole, depth=depth_of(lm), msg=spec)


def test_mixture_of_experts_is_not_trimmed():
    """An experts layer's router sees every position (capacity, load statistics): the last
    MLP stays whole."""
    lm = load_model("tiny:mixtral")
    assert not can_trim(lm, [])
    eng = Engine.of(lm)  # a derived card: its probe runs passes of its own
    seen, handle = _last_mlp_positions(lm)
    try:
        eng.run(_ids(lm), logits=1)
    finally:
        handle.remove()
    assert seen == [SEQ]
