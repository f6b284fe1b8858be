"""Which student layer stands for which teacher layer.

Proportional by depth is the default (the last layer maps to the last layer, the relative
depth is kept otherwise). A layer-subset student, whose layer ``j`` *is* teacher layer
``kept[j]``, can be mapped by what it kept instead (``kept``): a teacher layer goes to the
last student layer that copies a teacher layer at or below it, so the student site, like the
teacher's checkpoint, comes before the copies of the teacher's later layers that read it.
Linear CKA (Kornblith et al., 2019) picks, for each teacher layer,
the student layer whose representations of the same inputs are most similar up to a
rotation and isotropic scaling; it compares spaces of different widths, which the
teacher and a narrower student have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from mechscope.errors import InputError


def proportional_layer(layer: int, n_from: int, n_to: int) -> int:
    """Layer of a ``n_to``-layer model at the relative depth of ``layer`` in ``n_from``.

    Layer ``l`` ends the first ``(l + 1) / n_from`` of the network, so it maps to
    ``round((l + 1) * n_to / n_from) - 1``, clipped to ``[0, n_to - 1]``.
    """
    if not 0 <= layer < n_from or n_to < 1:
        raise InputError(
            f"expected 0 <= layer < {n_from} and n_to >= 1, got {layer}, {n_to}", field="layer"
        )
    return int(min(max(round((layer + 1) * n_to / n_from) - 1, 0), n_to - 1))


def proportional_map(layers: list[int], n_teacher: int, n_student: int) -> dict[int, int]:
    """``{teacher_layer: student_layer}`` by relative depth."""
    return {t: proportional_layer(t, n_teacher, n_student) for t in layers}


def kept_layer(layer: int, kept: Sequence[int]) -> int:
    """The student layer standing for teacher ``layer`` when student layer ``j`` is teacher
    layer ``kept[j]`` (increasing): the last ``j`` with ``kept[j] <= layer`` (0 if none).

    Why not by depth: SmolLM2's IOI information leaves S2 at teacher layers 19-23. Every
    fifth layer keeps teacher layers 0, 6, 12, 17, 23, 29; by depth, teacher layer 22 maps to
    student layer 4, which *is* teacher layer 23, the one that reads S2, so a patch there
    comes after the read. By what was kept it maps to student layer 3 (teacher 17), read by
    the student's copy of layer 23 as the teacher's layer 22 is.
    """
    if list(kept) != sorted(set(kept)) or not kept:
        raise InputError(f"expected increasing kept layers, got {list(kept)}", field="layers")
    below = [j for j, k in enumerate(kept) if k <= layer]
    return below[-1] if below else 0


def kept_map(layers: list[int], kept: Sequence[int]) -> dict[int, int]:
    """``{teacher_layer: student_layer}`` of a layer-subset student (:func:`kept_layer`)."""
    return {t: kept_layer(t, kept) for t in layers}


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of ``x [n, d1]`` and ``y [n, d2]`` (same n inputs), in fp64.

    ``CKA = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` with column-centred Xc, Yc:
    1 for representations equal up to rotation and scale, near 0 for unrelated ones.
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[0] != y.shape[0]:
        raise InputError(
            f"expected [n, d1] and [n, d2] with the same n, got "
            f"{tuple(x.shape)} and {tuple(y.shape)}",
            field="y",
        )
    xc = x.double() - x.double().mean(0, keepdim=True)  # [n, d1]
    yc = y.double() - y.double().mean(0, keepdim=True)  # [n, d2]
    cross = (yc.T @ xc).square().sum()
    denom = (xc.T @ xc).norm() * (yc.T @ yc).norm()
    return float(cross / denom) if denom > 0 else float("nan")


def cka_map(
    teacher: Mapping[int, torch.Tensor], student: Mapping[int, torch.Tensor]
) -> tuple[dict[int, int], np.ndarray]:
    """For each teacher layer, the student layer of highest linear CKA.

    ``teacher``: ``{layer: [n, d_T]}``; ``student``: ``{layer: [n, d_S]}`` on the same
    inputs. Returns the map and the ``[teacher layers, student layers]`` CKA matrix (rows
    and columns in sorted layer order).
    """
    t_layers, s_layers = sorted(teacher), sorted(student)
    if not t_layers or not s_layers:
        raise InputError("expected at least one layer on each side", field="layers")
    m = np.array([[linear_cka(teacher[t], student[s]) for s in s_layers] for t in t_layers])
    best = np.nan_to_num(m, nan=-1.0).argmax(1)
    return {t: s_layers[int(j)] for t, j in zip(t_layers, best, strict=True)}, m
