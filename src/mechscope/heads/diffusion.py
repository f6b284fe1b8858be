"""The masked-diffusion objective of bidirectional LMs (LLaDA-style), for one sample.

LLaDA trains on ``E_t E_mask [ (1/t) Σ_{masked i} −log p(x_i | x_masked) ]`` with a mask
ratio ``t ~ U(0, 1)``. Here ``p = (1 − ε) t + ε`` keeps the weight ``1/p`` finite, the loss
is normalised by the number of completion tokens (the SFT form), prompt tokens are never
masked, and the expectation is a Monte Carlo mean over ``n_draws`` mask draws that are fixed
by ``seed`` when the objective is built. Fixed draws make ``f(α)`` a deterministic function
of the gates, which integrated gradients needs (completeness is exact only for a fixed f).
Every draw is one input row, so one gate vector costs ``n_draws`` rows of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mechscope.data.tokens import answer_token_ids, encode
from mechscope.errors import InputError


@dataclass(frozen=True, eq=False)
class MaskedDiffusionLoss:
    """Monte Carlo masked-token cross-entropy weighted by ``1/p`` (lower is better)."""

    sample_id: str
    input_ids: torch.Tensor  # [n_draws, seq] with mask tokens placed
    positions: torch.Tensor  # [k] completion positions (logits kept there)
    targets: torch.Tensor  # [k] original completion tokens
    masked: torch.Tensor  # [n_draws, k] bool: which completion tokens each draw masks
    p: torch.Tensor  # [n_draws] masking probability of each draw
    name: str = "masked_diffusion"
    higher_is_better: bool = False

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @classmethod
    def from_mask(
        cls,
        input_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        mask_token_id: int | None,
        *,
        sample_id: str,
        n_draws: int = 8,
        eps: float = 1e-3,
        seed: int = 0,
    ) -> MaskedDiffusionLoss:
        """Draw ``n_draws`` masks over the completion positions of ``input_ids [seq]``."""
        if mask_token_id is None:
            raise InputError(
                "a model with a mask token (masked-diffusion loss)",
                sample=sample_id,
                field="mask_token_id",
            )
        if isinstance(n_draws, bool) or not isinstance(n_draws, int) or n_draws < 1:
            raise InputError(f"n_draws >= 1, got {n_draws!r}", sample=sample_id, field="n_draws")
        if not 0.0 < float(eps) < 1.0:
            raise InputError(f"eps in (0, 1), got {eps!r}", sample=sample_id, field="eps")
        ids = input_ids.reshape(-1).long()  # [seq]
        where = torch.nonzero(completion_mask.reshape(-1).bool()).flatten()  # [k]
        if completion_mask.numel() != ids.numel() or where.numel() == 0:
            raise InputError(
                f"a completion mask of length {ids.numel()} selecting at least one token",
                sample=sample_id,
                field="completion",
            )
        gen = torch.Generator().manual_seed(int(seed))
        t = torch.rand(n_draws, generator=gen, dtype=torch.float64)  # [n_draws]
        p = (1.0 - eps) * t + eps
        u = torch.rand((n_draws, where.numel()), generator=gen, dtype=torch.float64)
        masked = u < p[:, None]  # [n_draws, k]
        rows = ids[None].repeat(n_draws, 1)  # [n_draws, seq]
        block = rows[:, where]
        rows[:, where] = torch.where(masked, torch.full_like(block, int(mask_token_id)), block)
        return cls(sample_id, rows, where, ids[where], masked, p)

    def _per_token(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        lp = torch.log_softmax(logits.float(), dim=-1)  # [n_gates * n_draws, k, vocab]
        idx = self.targets.to(lp.device)[None, :, None].expand(lp.shape[0], -1, 1)
        nll = -lp.gather(-1, idx)[..., 0]  # [n_gates * n_draws, k]
        return nll.view(n_gates, self.rows, -1)  # [n_gates, n_draws, k]

    def value(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        nll = self._per_token(logits, n_gates)  # [n_gates, n_draws, k]
        masked = self.masked.to(nll.device)
        weight = masked.float() / self.p.to(nll.device).float()[:, None]  # [n_draws, k]
        per_draw = (nll * weight[None]).sum(dim=-1) / masked.shape[1]  # [n_gates, n_draws]
        return per_draw.mean(dim=-1)  # [n_gates]

    def accuracy(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        pred = logits.argmax(dim=-1).view(n_gates, self.rows, -1)  # [n_gates, n_draws, k]
        masked = self.masked.to(pred.device)
        hit = (pred == self.targets.to(pred.device)[None, None]) & masked[None]
        return hit.float().sum(dim=(1, 2)) / masked.sum().clamp(min=1).float()


def diffusion_objective(
    tokenizer: Any,
    mask_token_id: int | None,
    prompt: str,
    completion: str,
    *,
    sample_id: str,
    n_draws: int = 8,
    eps: float = 1e-3,
    seed: int = 0,
) -> MaskedDiffusionLoss:
    """Masked-diffusion loss of ``completion`` given ``prompt`` (prompt tokens never masked)."""
    if not completion:
        raise InputError(
            "a non-empty completion; the selection is empty", sample=sample_id, field="completion"
        )
    p = encode(tokenizer, prompt, sample=sample_id)
    comp = answer_token_ids(tokenizer, prompt, completion, sample=sample_id, field="completion")
    ids = torch.tensor(p.ids + comp)  # [seq]
    mask = torch.zeros(ids.shape[0], dtype=torch.bool)
    mask[len(p.ids) :] = True
    return MaskedDiffusionLoss.from_mask(
        ids, mask, mask_token_id, sample_id=sample_id, n_draws=n_draws, eps=eps, seed=seed
    )
