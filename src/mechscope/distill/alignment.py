"""Before training: map teacher layers to student layers and fit the frozen ``W*`` maps.

Both use the *initial* student (before any update), so they are reproducible from the
config alone; a resumed trial recomputes them identically before loading its checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mechscope.distill.mapping import cka_map, kept_map, proportional_layer, proportional_map
from mechscope.distill.pairset import PairSet
from mechscope.distill.passes import read_resid
from mechscope.distill.procrustes import fit_alignments
from mechscope.distill.teacher_cache import TeacherTask
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models import LoadedModel


@torch.no_grad()
def key_reads(
    lm: LoadedModel,
    data: PairSet,
    layers: Sequence[int],
    *,
    batch_size: int = 16,
    corrupt: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``resid_post`` at the key positions: ``[N, len(layers), P, d]`` for clean (and corrupt)."""
    eng = Engine.of(lm)
    layers = list(layers)
    out: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    for start in range(0, len(data), batch_size):
        b = data.subset(range(start, min(start + batch_size, len(data))))
        runs = [(b.clean, b.clean_mask)] + ([(b.corrupt, b.corrupt_mask)] if corrupt else [])
        for col, (ids, mask) in enumerate(runs):
            h = read_resid(eng, ids, mask, layers)
            stack = torch.stack([h[layer] for layer in layers], 1).float().cpu()  # [b, Ls, s, d]
            at = b.positions[:, :, col]  # [b, P]
            rows = torch.arange(len(b))[:, None].expand_as(at)
            out[col].append(stack[rows, :, at].transpose(1, 2))  # [b, Ls, P, d]
    clean = torch.cat(out[0])
    return clean, (torch.cat(out[1]) if corrupt else None)


def layer_maps(
    kind: str,
    teacher: TeacherTask,
    student: LoadedModel,
    *,
    kept: Sequence[int] | None = None,
    batch_size: int = 16,
) -> tuple[dict[int, int], dict[int, int], np.ndarray | None]:
    """``(checkpoint map teacher->student, FitNets map student->teacher, CKA matrix)``.

    ``kind="proportional"``: by relative depth. ``kind="kept"``: a layer-subset student
    whose layer ``j`` is teacher layer ``kept[j]`` (:func:`~mechscope.distill.mapping.
    kept_layer`). ``kind="cka"``: by linear CKA of clean representations at the key
    positions of the training pairs (all teacher layers × all student layers; the matrix
    is returned for the record). Every way, a teacher layer below its last maps below the
    student's last layer (:func:`keep_causal`).
    """
    n_t = teacher.key_clean.shape[1]
    n_s = student.n_layers
    ckpt_layers = sorted({c.layer for c in teacher.checkpoints})
    if kind == "kept":
        if kept is None or len(kept) != n_s:
            raise InputError(
                "expected a layer_subset student for mapping 'kept'", field="checkpoints.mapping"
            )
        fit = {j: int(kept[j]) for j in range(n_s)}
        return keep_causal(kept_map(ckpt_layers, kept), n_t, n_s), fit, None
    if kind == "proportional":
        fit = {j: proportional_layer(j, n_s, n_t) for j in range(n_s)}
        return keep_causal(proportional_map(ckpt_layers, n_t, n_s), n_t, n_s), fit, None
    s_clean, _ = key_reads(student, teacher.train, range(n_s), batch_size=batch_size, corrupt=False)

    def flat(x: torch.Tensor, layer: int) -> torch.Tensor:
        return x[:, layer].reshape(-1, x.shape[-1])  # [N * P, d]

    t_all = {t: flat(teacher.key_clean, t) for t in range(n_t)}
    s_all = {j: flat(s_clean, j) for j in range(n_s)}
    t_to_s, matrix = cka_map(t_all, s_all)  # matrix [n_t, n_s]
    fit = {j: int(np.nan_to_num(matrix[:, j], nan=-1.0).argmax()) for j in range(n_s)}
    return keep_causal({t: t_to_s[t] for t in ckpt_layers}, n_t, n_s), fit, matrix


def keep_causal(ckpt_map: dict[int, int], n_teacher: int, n_student: int) -> dict[int, int]:
    """Move checkpoints of teacher layers below the last off the student's last layer.

    A patch of the last layer's residual at a position other than the answer cannot change
    the answer (no later layer reads it). Teacher checkpoints there are excluded by the
    search, but a deep teacher layer can map to the student's last layer by depth; it is
    moved one layer down so the student's site can carry the same causal role.
    """
    if n_student < 2:
        return dict(ckpt_map)
    return {t: min(s, n_student - 2) if t < n_teacher - 1 else s for t, s in ckpt_map.items()}


def student_alignments(
    teacher: TeacherTask, student: LoadedModel, ckpt_map: dict[int, int], *, batch_size: int = 16
) -> dict[int, torch.Tensor]:
    """One ``W* [d_T, d_S]`` per checkpoint teacher layer, fitted on the contrastive
    differences of all training pairs at that layer's checkpoints (pooled)."""
    sites = teacher.sites()
    s_layers = sorted({ckpt_map[t] for t, _ in sites})
    s_clean, s_corrupt = key_reads(student, teacher.train, s_layers, batch_size=batch_size)
    s_d = s_clean - s_corrupt  # [N, Ls, P, d_S]
    t_d = teacher.key_clean.float() - teacher.key_corrupt.float()  # [N, L, P, d_T]
    src: dict[int, list[torch.Tensor]] = {}
    dst: dict[int, list[torch.Tensor]] = {}
    for t, p in sites:
        src.setdefault(t, []).append(s_d[:, s_layers.index(ckpt_map[t]), p])
        dst.setdefault(t, []).append(t_d[:, t, p])
    return fit_alignments(
        {t: torch.cat(v) for t, v in src.items()}, {t: torch.cat(v) for t, v in dst.items()}
    )
