"""Divergences and token losses computed from log-probabilities.

Every function takes log-probabilities (``log_softmax`` output) whose last dimension is the
vocabulary, with any leading dimensions (``[batch, seq, vocab]``, ``[layers, seq, vocab]``
...), and reduces over the vocabulary only. Working in log space matters: late logit-lens
layers push many probabilities to 1e-30 and below, where ``p * log(p / q)`` computed from
probabilities underflows to NaN or explodes. Arithmetic is done in fp32 whatever the input
dtype (fp64 inputs stay fp64, for reference checks); half-precision log-probs should be
produced by a fp32 ``log_softmax`` upstream, since upcasting cannot restore lost digits.

Terms with ``p == 0`` contribute exactly 0 (the limit of ``p log p``), with a zero gradient,
so masked vocabularies (``-inf`` log-probs) are handled.
"""

from __future__ import annotations

import math

import torch

from mechscope.errors import InputError

LN2 = math.log(2.0)


def kl_from_logp(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) in nats over the last dimension.

    Infinite where ``q`` is 0 but ``p`` is not, as the definition demands. Rounding can make
    the sum of nearly identical distributions a hair below 0; it is clamped to 0 because KL
    is non-negative and a negative value would be read as meaningful downstream.
    """
    lp, lq = _pair(logp, logq)  # [..., vocab]
    if _finite(lp, lq):  # no p = 0 by definition: underflowed terms are 0·finite = 0
        return (lp.exp() * (lp - lq)).sum(dim=-1).clamp_min(0.0)  # [...]
    return _kl_terms(lp, lq).sum(dim=-1).clamp_min(0.0)  # [...]


def js_from_logp(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in nats over the last dimension, in ``[0, ln 2]``.

    ``JS = ½ KL(p ‖ m) + ½ KL(q ‖ m)`` with ``m = (p + q) / 2``, where ``log m`` is computed
    as ``logaddexp(log p, log q) - ln 2`` (a two-term logsumexp), so it never underflows. JS
    is symmetric and bounded, unlike KL, so a single near-zero probability cannot make a
    layer curve spike. The result is clamped to ``[0, ln 2]`` against rounding.
    """
    lp, lq = _pair(logp, logq)  # [..., vocab]
    if _finite(lp, lq):  # the guards below only matter where a log-probability is -inf
        logm = torch.logaddexp(lp, lq) - LN2  # [..., vocab]
        halves = (lp.exp() * (lp - logm)).sum(dim=-1) + (lq.exp() * (lq - logm)).sum(dim=-1)
        return (0.5 * halves).clamp(0.0, LN2)  # [...]
    both_zero = torch.isneginf(lp) & torch.isneginf(lq)
    # Where p = q = 0 the mixture is 0 too; a finite stand-in avoids NaN gradients from
    # logaddexp(-inf, -inf) (those entries contribute 0 either way).
    lp_m = torch.where(both_zero, torch.zeros_like(lp), lp)
    lq_m = torch.where(both_zero, torch.zeros_like(lq), lq)
    logm = torch.logaddexp(lp_m, lq_m) - LN2  # [..., vocab]
    js = 0.5 * (_kl_terms(lp, logm).sum(dim=-1) + _kl_terms(lq, logm).sum(dim=-1))
    return js.clamp(0.0, LN2)  # [...]


def entropy_from_logp(logp: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last dimension: ``-Σ p log p``."""
    lp = _upcast(logp)  # [..., vocab]
    p = lp.exp()
    safe = torch.where(p > 0, lp, torch.zeros_like(lp))
    return -(p * safe).sum(dim=-1)  # [...]


def nll_of_targets(
    logp: torch.Tensor, targets: torch.Tensor, *, ignore_index: int | None = None
) -> torch.Tensor:
    """Negative log-likelihood of the given target token at every position.

    ``logp`` is ``[..., vocab]`` and ``targets`` is ``[...]`` (integer token ids), e.g. the
    teacher-forced continuation shifted by one. Returns ``[...]`` in nats. Positions equal
    to ``ignore_index`` (padding, prompt tokens) get NaN so that a later ``nanmean`` skips
    them instead of averaging in a fake 0.
    """
    lp = _upcast(logp)  # [..., vocab]
    if targets.shape != lp.shape[:-1]:
        raise InputError(
            f"expected shape {tuple(lp.shape[:-1])} (logp without its vocab dimension), "
            f"got {tuple(targets.shape)}",
            field="targets",
        )
    if targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise InputError(f"expected integer token ids, got dtype {targets.dtype}", field="targets")
    ignored = targets == ignore_index if ignore_index is not None else None
    ids = targets.long() if ignored is None else torch.where(ignored, 0, targets.long())
    vocab = lp.shape[-1]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise InputError(
            f"expected token ids in [0, {vocab}), got range [{int(ids.min())}, {int(ids.max())}]",
            field="targets",
        )
    nll = -lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # [...]
    if ignored is not None:
        nll = nll.masked_fill(ignored, float("nan"))
    return nll


def _finite(lp: torch.Tensor, lq: torch.Tensor) -> bool:
    """Whether every entry of both is finite: their sums are (an inf or NaN anywhere makes
    a sum inf or NaN; log-probabilities cannot sum past fp32's range). One reduction each,
    where ``isfinite(x).all()`` costs several times more."""
    return bool(torch.isfinite(lp.sum() + lq.sum()))


def _kl_terms(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """Per-entry ``p (log p - log q)``, exactly 0 where ``p == 0`` (also in the gradient)."""
    p = lp.exp()
    nonzero = p > 0
    zero = torch.zeros_like(lp)
    return p * (torch.where(nonzero, lp, zero) - torch.where(nonzero, lq, zero))


def _pair(logp: torch.Tensor, logq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logp.shape != logq.shape:
        raise InputError(
            f"expected the same shape as logp {tuple(logp.shape)}, got {tuple(logq.shape)}",
            field="logq",
        )
    lp, lq = _upcast(logp), _upcast(logq)
    if lp.dtype != lq.dtype:  # one fp64 input: compare at the higher precision
        lp, lq = lp.double(), lq.double()
    return lp, lq


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """fp32 for every float dtype below fp32; fp64 stays fp64."""
    if not x.dtype.is_floating_point:
        raise InputError(
            f"expected floating-point log-probabilities, got dtype {x.dtype}", field="logp"
        )
    return x if x.dtype == torch.float64 else x.float()
