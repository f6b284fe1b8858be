"""``Engine.unembed(h, out=buffer)`` writes the same logits as ``Engine.unembed(h)`` into
the buffer it is given, bit for bit.

Reference: the call without ``out`` (the model's own head modules on an fp32 model, the
chunked fp32 cast of a low-precision one). Families: every causal card's tiny model and
the real stories260K, Gemma 2 (soft-capped), Granite (logits divided) and Cohere (logits
scaled), a head with a bias, a bf16 model, and a head with a hook (called, so the hook's
edit stays).
"""

from __future__ import annotations

import pytest
import torch
from test_cache import _model

from mechscope.engine import Engine
from mechscope.models import load_model


def _hidden(lm, *shape: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(4)
    return 3.0 * torch.randn(*shape, lm.d_model, generator=gen)  # [..., d_model]


def _check_written(eng: Engine, h: torch.Tensor) -> None:
    want = eng.unembed(h)  # [..., vocab]
    buf = torch.full(want.shape, float("nan"))  # stale contents must not survive
    got = eng.unembed(h, out=buf)
    assert got.data_ptr() == buf.data_ptr()
    assert torch.equal(got, want)


@pytest.mark.parametrize("shape", [(5,), (4, 2)])
def test_out_holds_the_same_logits(causal_model, shape):
    lm, eng = causal_model
    with torch.inference_mode():
        _check_written(eng, _hidden(lm, *shape))


@pytest.mark.parametrize("family", ["gemma2", "granite", "cohere"])
def test_out_of_a_capped_or_scaled_head(family):
    """Gemma 2's final soft-cap, Granite's logit divisor and Cohere's logit scale act on
    the buffer in place, with the same operations."""
    lm = load_model("tiny:gemma2") if family == "gemma2" else _model(family)
    assert lm.logit_softcap or lm.logit_scale is not None
    with torch.inference_mode():
        _check_written(Engine.of(lm), _hidden(lm, 3, 2))


def test_out_of_a_head_with_a_bias():
    lm = load_model("tiny:llama")
    head = lm.unembed_modules()[-1]
    gen = torch.Generator().manual_seed(1)
    head.bias = torch.nn.Parameter(torch.randn(head.out_features, generator=gen))
    with torch.inference_mode():
        _check_written(Engine.of(lm), _hidden(lm, 3, 2))


def test_out_of_a_bf16_model():
    """The chunked fp32 cast of the unembedding writes its chunks into ``out``."""
    lm = load_model("tiny:llama", dtype="bfloat16")
    with torch.inference_mode():
        _check_written(Engine.of(lm), _hidden(lm, 3, 2).bfloat16())


def test_a_hooked_head_is_called():
    """A hook on the head (a user's edit, accelerate's device hook) still runs."""
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    h = _hidden(lm, 3)
    plain = eng.unembed(h).detach()
    handle = lm.unembed_modules()[-1].register_forward_hook(lambda m, a, o: o + 1.0)
    try:
        with torch.inference_mode():
            got = eng.unembed(h, out=torch.empty(3, lm.vocab_size))
    finally:
        handle.remove()
    torch.testing.assert_close(got, plain + 1.0, atol=0, rtol=0)


def test_a_wrong_buffer_is_refused():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    h = _hidden(lm, 3)
    v = lm.vocab_size
    with torch.inference_mode():
        for buf in (
            torch.empty(4, v),  # wrong rows
            torch.empty(3, v + 1),  # wrong width
            torch.empty(3, v, dtype=torch.float16),  # not fp32
            torch.empty(v, 3).T,  # not contiguous
        ):
            with pytest.raises(ValueError, match=r"unembed\(out=\.\.\.\)"):
                eng.unembed(h, out=buf)
        with pytest.raises(ValueError, match="fp32=True"):
            eng.unembed(h, fp32=False, out=torch.empty(3, v))
    with pytest.raises(ValueError, match="without gradients"):
        eng.unembed(h.requires_grad_(True), out=torch.empty(3, v))
