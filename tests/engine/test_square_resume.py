"""A resumed pass pads its queries to a square so SDPA takes its causal path.

Reference: the same resumed pass through the explicit-mask rectangle (``square_pad``
forced to 0), and the full pass without a cache. The rows the square computes are the
rectangle's rows with the same keys and weights, so the first comparison is exact
(``torch.equal``); the full pass has other matmul shapes, so it is compared up to rounding.
A spy shows the square was taken (or not, where it must not be).
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.engine.core import attention
from mechscope.engine.interventions.prefix import Resume
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

SEQ = 12  # conftest.RESUME_SEQ


def _ids(lm, batch: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, SEQ), generator=gen)


@pytest.fixture
def pads(monkeypatch):
    """Every padding ``square_pad`` decided in the pass (0 = the rectangle)."""
    seen: list[int] = []
    real = attention.square_pad

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(attention, "square_pad", spy)
    return seen


def _rectangle(monkeypatch):
    monkeypatch.setattr(attention, "square_pad", lambda *a, **k: 0)


def _patched_tail(lm, eng, start: int):
    """A resumed pass with a patch on its first computed position, and its full pass."""
    ids = _ids(lm)
    site = Site("resid_pre", lm.n_layers // 2)
    act = eng.run(ids, [Read(site)], logits=False)[site]  # [1, seq, d]
    noise = torch.randn(act.shape, generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(1, SEQ, dtype=torch.bool)
    mask[0, start] = True
    patch = Patch(site, act + noise, mask=mask)
    base = eng.run(ids, cache=True, logits=False)
    keep = torch.arange(start, SEQ)

    def tail(grad: bool = False):
        resume = Resume(base.cache, start)
        return eng.run(ids, [patch], logits=keep, resume=resume, grad=grad).logits

    full = eng.run(ids, [patch], logits=keep).logits  # [1, SEQ - start, vocab]
    return tail, full


def test_square_equals_the_rectangle_exactly(resumable_model, pads, monkeypatch):
    lm, eng = resumable_model
    start = 4  # 8 queries on 12 keys: more than half
    tail, full = _patched_tail(lm, eng, start)
    square = tail()
    if not any(pads):
        pytest.skip(f"{lm.spec}: no layer of this family reaches SDPA with a causal mask")
    assert set(pads) <= {0, start}
    _rectangle(monkeypatch)
    rect = tail()
    assert torch.equal(square, rect)
    assert_rounding_close(square, full, depth=depth_of(lm), msg=lm.spec)


def test_no_square_when_the_queries_cover_half_the_keys_or_less(stories_path, pads):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    tail, full = _patched_tail(lm, eng, SEQ // 2)  # 6 queries on 12 keys
    out = tail()
    assert pads and not any(pads)
    assert_rounding_close(out, full, depth=depth_of(lm))


def test_no_square_under_gradients_or_padding(stories_path, pads):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    tail, _ = _patched_tail(lm, eng, 4)
    tail()
    assert any(pads)  # the same pass without gradients takes the square
    pads.clear()
    tail(grad=True)
    assert pads and not any(pads)
    # a mask that is not exactly causal (a padded key) keeps the rectangle
    q, k = 8, 12
    mask = torch.ones(1, 1, q, k, dtype=torch.bool).tril(k - q)
    mask[..., 0] = False
    query, key = torch.zeros(1, 2, q, 4), torch.zeros(1, 2, k, 4)
    module = torch.nn.Module()
    causal = torch.ones(1, 1, q, k, dtype=torch.bool).tril(k - q)
    with torch.no_grad():
        assert attention.square_pad(module, query, key, mask, 0.0, False, {}, {}) == 0
        assert attention.square_pad(module, query, key, causal, 0.0, False, {}, {}) == k - q
        assert attention.square_pad(module, query, key, causal, 0.0, True, {}, {}) == 0  # bidir.
        few = torch.zeros(1, 2, 6, 4)  # 6 queries on 12 keys: the rectangle is no dearer
        half = torch.ones(1, 1, 6, k, dtype=torch.bool).tril(k - 6)
        assert attention.square_pad(module, few, key, half, 0.0, False, {}, {}) == 0
    assert attention.square_pad(module, query, key, causal, 0.0, False, {}, {}) == 0  # grad
