"""A cache's logits are read out on first access from the final norm's input the pass
kept: bit for bit the logits of the same pass, and never held unless asked for."""

from __future__ import annotations

import threading

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine import Edit, Engine, Read, Site
from mechscope.engine.core.inputs import to_tokens
from mechscope.models import load_model


@pytest.mark.parametrize(
    ("model", "dtype"),
    [
        ("tiny:llama", None),
        ("tiny:gpt2", None),
        ("tiny:gemma2", None),  # final soft-cap
        ("tiny:cohere", None),  # logit scale
        ("tiny:qwen3", "bfloat16"),  # the fp32 readout of a low-precision head
    ],
)
def test_logits_on_access_equal_the_passs_logits(model, dtype):
    lm = load_model(model, dtype=dtype)
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a left-padded row
    tokens = to_tokens(lm, ids, mask)  # the cache's inputs: position ids from the mask
    want = (
        Engine.of(lm)
        .run(tokens.ids, attention_mask=tokens.attention_mask, position_ids=tokens.position_ids)
        .logits
    )  # [2, 9, vocab] fp32
    cache = lm.run_with_cache(ids, ["resid_post"], attention_mask=mask)
    assert cache._logits is None  # nothing read out yet
    assert torch.equal(cache.logits, want)
    assert cache.logits is cache.logits  # read out once, then kept
    assert torch.equal(cache.to("cpu").logits, want)


def test_no_logits_asked_none_kept():
    lm = load_model("tiny:llama")
    ids = torch.randint(3, 200, (1, 6), generator=torch.Generator().manual_seed(1))
    assert lm.run_with_cache(ids, ["z"], logits=False).logits is None
    assert lm.run_with_cache(ids, ["z"], stop_at_layer=1).logits is None


@pytest.mark.parametrize("model", ["tiny:llama", "tiny:gemma3_text"])
def test_a_pass_without_logits_never_runs_the_head(model):
    """The head's one kept row still multiplies the whole unembedding: a pass that wants no
    logits ends before it, with every layer's reads taken; a module site on the head keeps
    it running."""
    lm = load_model(model)
    eng = Engine.of(lm)
    head = lm.unembed_modules()[-1]
    calls = []
    handle = head.register_forward_hook(lambda *_: calls.append(1))
    try:
        ids = torch.randint(3, 200, (1, 6), generator=torch.Generator().manual_seed(2))
        last = Site("resid_post", lm.n_layers - 1)
        out = eng.run(ids, [Read(last)], logits=False)
        assert out.logits is None and calls == []
        full = eng.run(ids, [Read(last)])
        assert len(calls) == 1
        assert torch.equal(out.reads[last], full.reads[last])
        on_head = Site.module(lm.card.unembed[-1])
        read = eng.run(ids, [Read(on_head)], logits=False)
        assert len(calls) == 2 and read.reads[on_head].shape[-1] == lm.vocab_size
    finally:
        handle.remove()


def test_another_threads_readout_runs_while_a_pass_skips_the_head():
    """The head module is shared: while one thread's pass (no logits) is inside the model,
    another thread reads logits out through the head, untouched by the first pass's stop."""
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    ids = torch.randint(3, 200, (1, 6), generator=torch.Generator().manual_seed(3))
    h = torch.randn(2, lm.d_model, generator=torch.Generator().manual_seed(4))
    want = eng.unembed(h)
    inside, done = threading.Event(), threading.Event()

    def hold(act: torch.Tensor, ctx) -> None:  # the first pass waits inside the model
        inside.set()
        assert done.wait(30)

    got = {}

    def other() -> None:
        assert inside.wait(30)
        try:
            got["logits"] = eng.unembed(h)
        finally:
            done.set()

    reader = threading.Thread(target=other)
    reader.start()
    out = eng.run(ids, [Edit(Site("resid_post", lm.n_layers - 1), hold)], logits=False)
    reader.join()
    assert out.logits is None
    assert torch.equal(got["logits"], want)
