"""A pass that keeps some positions' logits gives the head one contiguous block: on CPU a
strided ``[batch, kept, d]`` view makes ``matmul`` read the whole unembedding once per row."""

from __future__ import annotations

import threading

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine import Engine
from mechscope.models import load_model
from tolerance import assert_rounding_close


def _head_inputs(lm) -> tuple[list[torch.Tensor], torch.utils.hooks.RemovableHandle]:
    """Each call's input of the head, after every pre-hook."""
    seen: list[torch.Tensor] = []

    def spy(module, args, output):
        seen.append(args[0].detach())

    return seen, lm.unembed_modules()[-1].register_forward_hook(spy)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("keep", [1, 3])
def test_kept_rows_reach_the_head_as_one_block(keep, grad):
    lm = load_model("tiny:llama")
    ids = torch.randint(3, 200, (4, 9), generator=torch.Generator().manual_seed(0))
    seen, handle = _head_inputs(lm)
    try:
        with torch.no_grad():  # the model's own call: the strided view the fix is for
            lm.model(input_ids=ids, logits_to_keep=keep)
        out = Engine.of(lm).run(ids, logits=keep, grad=grad)
        full = Engine.of(lm).run(ids).logits  # [4, 9, vocab]: every position, no slice
    finally:
        handle.remove()
    assert [x.is_contiguous() for x in seen] == [False, True, True]
    # the kept rows' logits are the full pass's up to the rounding of one product: the
    # same rows, summed in another blocking (scale: the largest sum of |x_i · w_i|)
    w = lm.unembed_modules()[-1].weight  # [vocab, d]
    scale = (seen[2].abs() @ w.abs().T).amax().item()
    assert_rounding_close(out.logits.detach(), full[:, -keep:], scale=scale, depth=1)


def test_another_threads_call_of_the_head_is_left_alone():
    """The hook acts on its own pass only: the head module is shared."""
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    head = lm.unembed_modules()[-1]
    inside, release = threading.Event(), threading.Event()
    other: list[bool] = []

    def hold(module, args):
        inside.set()
        release.wait(timeout=10)

    blocker = lm.layer_module(0).register_forward_pre_hook(hold)
    ids = torch.randint(3, 200, (2, 7), generator=torch.Generator().manual_seed(1))
    worker = threading.Thread(target=lambda: eng.run(ids, logits=1))
    worker.start()
    try:
        assert inside.wait(timeout=10)
        blocker.remove()  # this thread's own call passes layer 0 freely
        x = torch.randn(2, 7, head.in_features)[:, -1:]  # strided, as the model's own slice
        spy = head.register_forward_hook(lambda m, a, o: other.append(a[0].is_contiguous()))
        try:
            head(x)
        finally:
            spy.remove()
    finally:
        release.set()
        worker.join(timeout=10)
    assert other == [False]
