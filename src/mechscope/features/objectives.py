"""What one training step of one dictionary minimises: TopK, BatchTopK or JumpReLU.

Every loss is in units of the target's variance, so one number means the same for every
site and model: the fraction of variance unexplained ``FVU = Σ‖y − ŷ‖² / Σ‖y − ȳ‖²`` over
the batch (sparsify's loss), plus

- TopK (Gao et al. 2024): the auxiliary loss of dead features, the ``k_aux = d_in / 2``
  largest pre-activations among features that have not fired for ``dead_tokens`` tokens,
  asked to reconstruct the residual error, scaled by ``min(dead / k_aux, 1)``, weighted
  ``aux_coef``;
- BatchTopK (Bussmann et al. 2024): the ``k · batch`` largest activations over the whole
  batch are kept; the inference threshold is the running mean of the smallest kept one;
- JumpReLU (Rajamanoharan et al. 2024): ``f = z · H(z − θ)`` with a learnt threshold per
  feature, ``l0_coef · E[L0]`` added, the step function's gradient taken with a rectangle
  kernel of width ``bandwidth`` (straight-through), as in Gemma Scope.

The decoder rows are kept at unit norm (the gradient along each row removed before the step,
the rows renormalised after it), so a feature's activation is its size in the output space.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mechscope.dictionaries import Dictionary, DictionaryConfig
from mechscope.features.config import TrainConfig


@dataclass
class StepOutput:
    """One step's loss and what the log keeps of it (floats)."""

    loss: torch.Tensor
    fvu: float
    aux: float
    l0: float
    fired: torch.Tensor  # [d_sae] bool: features that fired in this batch
    kept_min: float | None = None  # BatchTopK: the smallest kept activation


def init_dictionary(
    config: TrainConfig,
    d_in: int,
    d_out: int,
    *,
    input_scale: float,
    b_dec: torch.Tensor,  # [d_out], in the scaled units
    seed: int,
    hook_in=None,
    hook_out=None,
) -> Dictionary:
    """A fresh dictionary: unit decoder rows drawn with ``seed``, the encoder their
    transpose where the widths agree (Gao et al.), ``b_dec`` the output's mean."""
    gen = torch.Generator().manual_seed(seed)
    w_dec = torch.randn(config.width, d_out, generator=gen)  # [d_sae, d_out]
    w_dec /= w_dec.norm(dim=-1, keepdim=True)
    if d_in == d_out:
        w_enc = w_dec.T.clone()  # [d_in, d_sae]
    else:
        w_enc = torch.randn(d_in, config.width, generator=gen) / d_in**0.5
    activation = config.activation
    threshold = None
    if activation == "jumprelu":
        threshold = torch.full((config.width,), config.init_threshold)
    kind = config.kind
    dict_config = DictionaryConfig(
        activation=activation,
        kind=kind,
        k=config.k if activation in ("topk", "batchtopk") else None,
        apply_b_dec_to_input=kind == "sae",
        input_scale=float(input_scale),
        hook_in=hook_in,
        hook_out=hook_out,
    )
    skip = torch.zeros(d_in, d_out) if kind == "skip_transcoder" else None
    return Dictionary(
        w_enc, torch.zeros(config.width), w_dec, b_dec.clone().float(), dict_config,
        threshold=threshold, w_skip=skip,
    )  # fmt: skip


def _scaled_in(d: Dictionary, x: torch.Tensor) -> torch.Tensor:
    """The encoder's input: ``x`` (already scaled) less ``b_dec`` where the SAE subtracts it."""
    return x - d.b_dec if d.config.apply_b_dec_to_input else x


def _decode(d: Dictionary, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = f @ d.w_dec + d.b_dec  # [B, d_out]
    return out + x @ d.w_skip if d.w_skip is not None else out


def _fvu(y: torch.Tensor, y_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(FVU, total variance)`` of the batch ``y [B, d]``."""
    total = (y - y.mean(0)).pow(2).sum()
    return (y - y_hat).pow(2).sum() / total, total


class _JumpReLU(torch.autograd.Function):
    """``z · H(z − θ)``; the threshold's gradient through a rectangle kernel of width ε."""

    @staticmethod
    def forward(ctx, z, threshold, bandwidth: float):
        ctx.save_for_backward(z, threshold)
        ctx.bandwidth = bandwidth
        return z * (z > threshold)

    @staticmethod
    def backward(ctx, grad):
        z, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        near = ((z - threshold).abs() < eps / 2).to(grad.dtype)
        grad_z = grad * (z > threshold)
        grad_t = (-(threshold / eps) * near * grad).sum(0)
        return grad_z, grad_t, None


class _Step(torch.autograd.Function):
    """``H(z − θ)`` (the L0); the threshold's gradient through the same kernel."""

    @staticmethod
    def forward(ctx, z, threshold, bandwidth: float):
        ctx.save_for_backward(z, threshold)
        ctx.bandwidth = bandwidth
        return (z > threshold).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        z, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        near = ((z - threshold).abs() < eps / 2).to(grad.dtype)
        return torch.zeros_like(z), (-(1.0 / eps) * near * grad).sum(0), None


def topk_step(
    d: Dictionary, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor, config: TrainConfig
) -> StepOutput:
    """TopK's loss on ``x [B, d_in]`` → ``y [B, d_out]`` (scaled); ``dead [d_sae]`` bool."""
    pre = _scaled_in(d, x) @ d.w_enc + d.b_enc  # [B, d_sae]
    top = pre.topk(config.k, dim=-1, sorted=False)
    values = torch.relu(top.values)  # [B, k]
    y_hat = F.embedding_bag(top.indices, d.w_dec, per_sample_weights=values, mode="sum")
    y_hat = y_hat + d.b_dec
    if d.w_skip is not None:
        y_hat = y_hat + x @ d.w_skip
    fvu, total = _fvu(y, y_hat)
    loss, aux = fvu, torch.zeros(())
    n_dead = int(dead.sum())
    if n_dead and config.aux_coef > 0:
        k_aux = min(x.shape[1] // 2, n_dead)
        masked = torch.where(dead, pre, torch.full_like(pre, -torch.inf))
        aux_top = masked.topk(k_aux, dim=-1, sorted=False)
        e_hat = F.embedding_bag(
            aux_top.indices, d.w_dec, per_sample_weights=torch.relu(aux_top.values), mode="sum"
        )
        e = (y - y_hat).detach()
        aux = min(n_dead / k_aux, 1.0) * (e_hat - e).pow(2).sum() / total
        loss = loss + config.aux_coef * aux
    fired = torch.zeros(d.d_sae, dtype=torch.bool)
    fired[top.indices[values > 0]] = True
    l0 = float((values > 0).sum()) / x.shape[0]
    return StepOutput(loss, float(fvu.detach()), float(aux.detach()), l0, fired)


def batchtopk_step(d: Dictionary, x: torch.Tensor, y: torch.Tensor, config: TrainConfig):
    """BatchTopK's loss: the ``k · B`` largest activations of the batch kept."""
    pre = torch.relu(_scaled_in(d, x) @ d.w_enc + d.b_enc)  # [B, d_sae]
    flat = pre.flatten()
    n_keep = min(config.k * x.shape[0], int((flat > 0).sum()))
    if n_keep == 0:
        f = torch.zeros_like(pre)
        kept_min = None
    else:
        kept = flat.topk(n_keep, sorted=False)
        f = torch.zeros_like(flat).scatter(0, kept.indices, kept.values).view_as(pre)
        kept_min = float(kept.values.min())
    fvu, _ = _fvu(y, _decode(d, f, x))
    fired = (f > 0).any(0)
    l0 = float((f > 0).sum()) / x.shape[0]
    return StepOutput(fvu, float(fvu.detach()), 0.0, l0, fired, kept_min)


def jumprelu_step(d: Dictionary, x: torch.Tensor, y: torch.Tensor, config: TrainConfig):
    """JumpReLU's loss: FVU plus ``l0_coef · E[L0]`` through the straight-through kernel."""
    pre = _scaled_in(d, x) @ d.w_enc + d.b_enc  # [B, d_sae]
    threshold = d.threshold
    f = _JumpReLU.apply(pre, threshold, config.bandwidth)
    fvu, _ = _fvu(y, _decode(d, f, x))
    l0 = _Step.apply(pre, threshold, config.bandwidth).sum(-1).mean()
    loss = fvu + config.l0_coef * l0
    fired = (f > 0).any(0).detach()
    return StepOutput(loss, float(fvu.detach()), 0.0, float(l0.detach()), fired)


@torch.no_grad()
def unit_decoder(d: Dictionary) -> None:
    """Renormalise the decoder rows to unit norm (after an optimizer step)."""
    d.w_dec /= d.w_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@torch.no_grad()
def drop_parallel_grad(d: Dictionary) -> None:
    """Remove from the decoder's gradient its component along each (unit) row, so the step
    moves the rows' directions, not their norms."""
    if d.w_dec.grad is None:
        return
    g = d.w_dec.grad  # [d_sae, d_out]
    g -= (g * d.w_dec).sum(-1, keepdim=True) * d.w_dec
