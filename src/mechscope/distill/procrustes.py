"""Procrustes alignment of student contrastive differences onto the teacher's.

Teacher and student residual bases are arbitrary, so the RCID loss compares directions only
after a fixed map ``W* [d_T, d_S]`` (fitted once before training, then frozen):
``W* = argmin_W ||T - S W^T||_F`` over maps with orthonormal columns (``d_T >= d_S``) or rows
(``d_T < d_S``), where ``S [N, d_S]`` and ``T [N, d_T]`` are the centred, row-normalised
differences of the same pairs. The solution is ``U V^T`` from the SVD ``T^T S = U Σ V^T``;
for equal widths it is the classic orthogonal Procrustes rotation
(``scipy.linalg.orthogonal_procrustes``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mechscope.errors import InputError

EPS = 1e-8


def centre_normalise(x: torch.Tensor) -> torch.Tensor:
    """Subtract the mean row, then scale every row to unit norm (fp64)."""
    xc = x.double() - x.double().mean(0, keepdim=True)  # [N, d]
    return xc / xc.norm(dim=-1, keepdim=True).clamp_min(EPS)


def procrustes_align(
    source: torch.Tensor, target: torch.Tensor, *, preprocess: bool = True
) -> torch.Tensor:
    """``W* [d_T, d_S]`` mapping ``source [N, d_S]`` (student) onto ``target [N, d_T]``.

    With ``preprocess`` (the default) both sides are centred and row-normalised first.
    Returns fp32; ``W^T W = I`` when ``d_T >= d_S``, ``W W^T = I`` otherwise.
    """
    if source.dim() != 2 or target.dim() != 2 or source.shape[0] != target.shape[0]:
        raise InputError(
            f"expected source [N, d_S] and target [N, d_T] with the same N, got "
            f"{tuple(source.shape)} and {tuple(target.shape)}",
            field="target",
        )
    if source.shape[0] < 2:
        raise InputError("expected at least 2 rows to fit an alignment", field="source")
    s = centre_normalise(source) if preprocess else source.double()
    t = centre_normalise(target) if preprocess else target.double()
    m = t.T @ s  # [d_T, d_S]
    u, _, vh = torch.linalg.svd(m, full_matrices=False)  # u [d_T, r], vh [r, d_S]
    return (u @ vh).float()  # [d_T, d_S]


def fit_alignments(
    student: Mapping[int, torch.Tensor], teacher: Mapping[int, torch.Tensor]
) -> dict[int, torch.Tensor]:
    """One frozen ``W*`` per teacher layer: ``{t_layer: [d_T, d_S]}`` from paired
    ``student[t_layer] [N, d_S]`` and ``teacher[t_layer] [N, d_T]`` differences."""
    missing = sorted(set(teacher) - set(student))
    if missing:
        raise InputError(
            f"expected student differences for teacher layers {missing}", field="student"
        )
    return {t: procrustes_align(student[t], teacher[t]) for t in sorted(teacher)}
