"""Distillation losses: output KL, FitNets, Informed FitNets and RCID.

Every method is trained with ``lambda_kl * KL + lambda_method * L_method``; the methods
differ in *what* of the teacher's inside they ask the student to reproduce:

- StandardKD: nothing (``L_method = 0``), outputs only.
- FitNets: the full clean representation at every mapped layer and position, through a
  learned linear projection (student width -> teacher width).
- InformedFitNets: the full clean representation, but only at the causal checkpoints,
  through the frozen Procrustes map ``W*`` (the "right places" ablation).
- RCID: the contrastive *difference* ``d = h_clean - h_corrupt`` at the checkpoints, through
  ``W*``: only the part of the representation that carries the task contrast.

Directions are compared as unit vectors, ``|| W d_S / |W d_S| - d_T / |d_T| ||^2``, which is 0
exactly when the aligned student difference points where the teacher's does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mechscope.errors import InputError

EPS = 1e-8


def kd_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``T^2 * KL(p_T || p_S)`` at temperature ``T``, mean over rows, in fp32 log space.

    ``student_logits``/``teacher_logits``: ``[n, vocab]``. The ``T^2`` factor keeps gradient
    magnitudes comparable across temperatures (Hinton et al., 2015).
    """
    if student_logits.shape != teacher_logits.shape:
        raise InputError(
            f"expected logits of one shape, got {tuple(student_logits.shape)} "
            f"and {tuple(teacher_logits.shape)}",
            field="teacher_logits",
        )
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)  # [n, V]
    t = F.log_softmax(teacher_logits.float().to(s.device) / temperature, dim=-1)  # [n, V]
    kl = (t.exp() * (t - s)).sum(-1)  # [n]
    return kl.mean() * temperature**2


def unit(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit norm (rows of norm < EPS are left tiny, never NaN)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(EPS)


def aligned_direction_loss(
    student: torch.Tensor, teacher: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """``mean_{b,k} || unit(W_k s_bk) - unit(t_bk) ||^2``.

    ``student [b, K, d_S]`` (has grad), ``teacher [b, K, d_T]`` (fixed), ``w [K, d_T, d_S]``.
    Ranges over ``[0, 4]``; 0 when every aligned student vector points like the teacher's.
    """
    if student.dim() != 3 or teacher.dim() != 3 or w.dim() != 3:
        raise InputError(
            "expected student [b, K, d_S], teacher [b, K, d_T], W [K, d_T, d_S]", field="student"
        )
    aligned = torch.einsum("kts,bks->bkt", w.to(student.dtype), student)  # [b, K, d_T]
    dtype = torch.float64 if aligned.dtype == torch.float64 else torch.float32  # >= fp32
    diff = unit(aligned.to(dtype)) - unit(teacher.to(aligned.device, dtype))  # [b, K, d_T]
    loss = diff.square().sum(-1).mean()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"aligned direction loss is {loss.item()}")
    return loss


class RCIDLoss(nn.Module):
    """RCID: contrastive differences at the checkpoints, compared through frozen ``W*``.

    ``checkpoint_layers[k]`` is the teacher layer of checkpoint ``k``; ``alignments`` maps a
    teacher layer to its ``W* [d_T, d_S]``. The maps are buffers: saved, moved with the
    module, never trained.
    """

    def __init__(self, checkpoint_layers: Sequence[int], alignments: Mapping[int, torch.Tensor]):
        super().__init__()
        missing = sorted(set(checkpoint_layers) - set(alignments))
        if missing:
            raise InputError(
                f"expected an alignment for teacher layers {missing}", field="alignments"
            )
        w = torch.stack([alignments[t].float() for t in checkpoint_layers])  # [K, d_T, d_S]
        self.register_buffer("w", w)

    def forward(self, student_diff: torch.Tensor, teacher_diff: torch.Tensor) -> torch.Tensor:
        """``student_diff [b, K, d_S]`` (student clean − corrupt), ``teacher_diff [b, K, d_T]``."""
        return aligned_direction_loss(student_diff, teacher_diff, self.w)


class InformedFitNetsLoss(RCIDLoss):
    """Same checkpoints and ``W*`` as RCID, but fed the clean representations ``h`` instead
    of differences: isolates what matching the *contrast* adds over matching the state."""


class FitNetsLoss(nn.Module):
    """FitNets (Romero et al., 2015): every student layer regresses its teacher layer.

    One learned projection ``[d_S -> d_T]`` per student layer. The squared error is divided
    by the mean squared norm of the teacher's vectors at that layer, so layers with large
    residual norms do not swamp the others and the loss is scale-free.
    """

    def __init__(self, n_layers: int, d_student: int, d_teacher: int):
        super().__init__()
        self.proj = nn.ModuleList(
            nn.Linear(d_student, d_teacher, bias=False) for _ in range(n_layers)
        )
        for p in self.proj:
            if d_student == d_teacher:
                nn.init.eye_(p.weight)
            else:
                nn.init.orthogonal_(p.weight)

    def forward(
        self, student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        """``student[j] [b, s, d_S]``, ``teacher[j] [b, s, d_T]``, ``mask [b, s]`` (1 = token)."""
        if len(student) != len(self.proj) or len(teacher) != len(self.proj):
            raise InputError(f"expected {len(self.proj)} layers on each side", field="student")
        m = mask.to(student[0].device).float().unsqueeze(-1)  # [b, s, 1]
        n = m.sum().clamp_min(1.0)
        total = student[0].new_zeros((), dtype=torch.float32)
        for proj, hs, ht in zip(self.proj, student, teacher, strict=True):
            ht = ht.float().to(hs.device)
            err = ((proj(hs).float() - ht).square() * m).sum() / n  # mean over tokens
            scale = ((ht.square() * m).sum() / n).clamp_min(EPS)
            total = total + err / scale
        return total / len(self.proj)
