"""Log-space divergences against scipy references, bounds and extreme distributions."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats
from scipy.spatial.distance import jensenshannon

from mechscope.errors import InputError
from mechscope.stats import entropy_from_logp, js_from_logp, kl_from_logp, nll_of_targets
from tolerance import assert_exact, assert_rounding_close, scale_of, weighted_logp_scale


def _logps(shape: tuple[int, ...], scale: float = 3.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(shape, generator=g) * scale, dim=-1)  # fp32


def _kl_scale(lp: torch.Tensor, lq: torch.Tensor) -> float:
    """What the rounding of ``Σ p·(log p − log q)`` acts on: the largest row of
    ``Σ p·(|log p| + |log q|)``. Each function is one fp32 stage on given log-probabilities
    (depth 1: its sum over the vocabulary is inside the stage, as a layer's matmuls are)."""
    return scale_of(weighted_logp_scale(lp, lq))


def _js_scale(lp: torch.Tensor, lq: torch.Tensor) -> float:
    """The same for JS: both halves' terms against the mixture ``log m``."""
    logm = torch.logaddexp(lp.double(), lq.double()) - math.log(2)
    return scale_of((weighted_logp_scale(lp, logm) + weighted_logp_scale(lq, logm)) / 2)


def test_js_matches_scipy_jensenshannon_squared() -> None:
    lp, lq = _logps((3, 4, 50), seed=1), _logps((3, 4, 50), seed=2)  # [batch, seq, vocab]
    got = js_from_logp(lp, lq)
    p, q = lp.double().exp().numpy(), lq.double().exp().numpy()
    ref = jensenshannon(p, q, axis=-1) ** 2  # natural log by default
    assert got.shape == (3, 4) and got.dtype == torch.float32
    # fp32 against float64 from the same log-probabilities.
    assert_rounding_close(got, ref, depth=1, scale=_js_scale(lp, lq))


def test_kl_and_entropy_match_scipy_entropy() -> None:
    lp, lq = _logps((5, 64), seed=3), _logps((5, 64), seed=4)
    p, q = lp.double().exp().numpy(), lq.double().exp().numpy()
    kl_ref = stats.entropy(p, q, axis=-1)
    assert_rounding_close(kl_from_logp(lp, lq), kl_ref, depth=1, scale=_kl_scale(lp, lq))
    h_ref = stats.entropy(p, axis=-1)
    h_scale = scale_of(weighted_logp_scale(lp))
    assert_rounding_close(entropy_from_logp(lp), h_ref, depth=1, scale=h_scale)


def test_js_symmetric_and_bounded_kl_nonnegative() -> None:
    lp, lq = _logps((200, 30), scale=6.0, seed=5), _logps((200, 30), scale=6.0, seed=6)
    js = js_from_logp(lp, lq)
    torch.testing.assert_close(js, js_from_logp(lq, lp), rtol=0, atol=0)
    assert torch.all(js >= 0) and torch.all(js <= math.log(2))
    assert torch.all(kl_from_logp(lp, lq) >= 0)
    assert_exact(kl_from_logp(lp, lp), torch.zeros(200))  # every term is p · (lp − lp) = 0
    # log m = log(2p) − ln 2 is lp only up to rounding.
    assert_rounding_close(js_from_logp(lp, lp), 0.0, depth=1, scale=_js_scale(lp, lp))


def test_disjoint_supports_reach_the_bounds() -> None:
    inf = float("inf")
    lp = torch.tensor([0.0, -inf, -inf])  # p = (1, 0, 0)
    lq = torch.tensor([-inf, math.log(0.5), math.log(0.5)])  # q = (0, .5, .5)
    assert_rounding_close(js_from_logp(lp, lq), math.log(2), depth=1, scale=_js_scale(lp, lq))
    assert torch.isinf(kl_from_logp(lp, lq))
    assert_rounding_close(entropy_from_logp(lq), math.log(2), depth=1, scale=math.log(2))


def test_extreme_distributions_stay_finite() -> None:
    # Near one-hot (logit gaps of 1e3 -> p ~ e^-1000, far below fp32's smallest value) and a
    # vocabulary with probabilities down to ~1e-40 (fp32 subnormals).
    sharp = torch.log_softmax(torch.randn(8, 1000) * 1e3, dim=-1)
    tiny = torch.log_softmax(torch.linspace(0.0, -92.0, 1000).expand(8, 1000), dim=-1)
    for a, b in [(sharp, tiny), (tiny, sharp), (sharp, sharp.flip(-1))]:
        js, kl = js_from_logp(a, b), kl_from_logp(a, b)
        assert torch.all(torch.isfinite(js)) and torch.all(torch.isfinite(kl))
        assert torch.all((js >= 0) & (js <= math.log(2))) and torch.all(kl >= 0)
    assert torch.all(torch.isfinite(entropy_from_logp(sharp)))
    # Reference in fp64 for the tiny-probability case.
    ref = js_from_logp(tiny.double(), sharp.double())
    assert_rounding_close(js_from_logp(tiny, sharp), ref, depth=1, scale=_js_scale(tiny, sharp))


def test_masked_vocab_gives_finite_gradients() -> None:
    logits = torch.randn(4, 10, requires_grad=True)
    mask = torch.zeros(4, 10, dtype=torch.bool)
    mask[:, :3] = True  # the same three tokens impossible under both distributions
    lp = torch.log_softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
    lq = torch.log_softmax((logits * 0.5).masked_fill(mask, float("-inf")), dim=-1)
    loss = js_from_logp(lp, lq).sum() + kl_from_logp(lp, lq).sum() + entropy_from_logp(lp).sum()
    loss.backward()
    assert torch.all(torch.isfinite(logits.grad))


def test_half_precision_is_upcast_and_fp64_kept() -> None:
    lp, lq = _logps((2, 16), seed=7), _logps((2, 16), seed=8)
    assert js_from_logp(lp.bfloat16(), lq.bfloat16()).dtype == torch.float32
    assert kl_from_logp(lp.double(), lq.double()).dtype == torch.float64
    assert entropy_from_logp(lp.half()).dtype == torch.float32


def test_nll_of_targets_matches_loop() -> None:
    lp = _logps((2, 5, 11), seed=9)  # [batch, seq, vocab]
    targets = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(0))
    got = nll_of_targets(lp, targets)
    # Picking an entry and negating it rounds nothing: equal bit for bit.
    for b in range(2):
        for t in range(5):
            assert got[b, t].item() == -lp[b, t, targets[b, t]].item()
    # Cross-check against torch's own loss as a second reference.
    ref = torch.nn.functional.nll_loss(lp.reshape(10, 11), targets.reshape(10), reduction="none")
    assert_exact(got.reshape(10), ref)


def test_nll_ignore_index_gives_nan() -> None:
    lp = _logps((6, 7), seed=10)
    targets = torch.tensor([1, 2, -100, 3, -100, 0])
    got = nll_of_targets(lp, targets, ignore_index=-100)
    assert torch.isnan(got[2]) and torch.isnan(got[4])
    assert got[0].item() == -lp[0, 1].item()  # an entry negated: exact


def test_bad_inputs_raise_input_error() -> None:
    lp = _logps((3, 7))
    with pytest.raises(InputError, match="logq"):
        kl_from_logp(lp, lp[:, :5])
    with pytest.raises(InputError, match="targets"):
        nll_of_targets(lp, torch.zeros(4, dtype=torch.long))
    with pytest.raises(InputError, match=r"\[0, 7\)"):
        nll_of_targets(lp, torch.tensor([0, 7, 1]))
    with pytest.raises(InputError, match="integer"):
        nll_of_targets(lp, torch.zeros(3))
    with pytest.raises(InputError, match="floating"):
        entropy_from_logp(torch.zeros(3, 7, dtype=torch.long))
