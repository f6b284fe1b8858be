"""Causal checkpoint search: where in the teacher does the contrast live?

Every (layer, key position) is scored by the mean norm of the contrastive difference
``d = h_clean - h_corrupt`` of ``resid_post`` over the training pairs. The top ``k`` become
checkpoints, under a diversity constraint: *modified* positions (their token differs between
clean and corrupt; low layers there only restate the embedding change) and *unmodified*
positions (same token; any difference was carried there by the model's own processing, the
cleaner signal) must both be represented.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from mechscope.errors import InputError

ZERO_NORM = 1e-6  # a position before the first modified token has d == 0 exactly


@dataclass(frozen=True)
class Checkpoint:
    """A teacher (layer, key position) chosen for distillation and consistency checks."""

    layer: int
    position: str
    modified: bool
    score: float

    @property
    def key(self) -> str:
        return f"L{self.layer}:{self.position}"

    def to_dict(self) -> dict:
        return asdict(self)


def contrast_scores(key_clean: torch.Tensor, key_corrupt: torch.Tensor) -> torch.Tensor:
    """Mean ``||h_clean - h_corrupt||`` per (layer, position).

    ``key_clean``/``key_corrupt``: ``[N, L, P, d]`` residuals at the key positions.
    Returns ``[L, P]`` fp32.
    """
    if key_clean.shape != key_corrupt.shape or key_clean.dim() != 4:
        raise InputError(
            f"expected two [N, L, P, d] tensors of one shape, got "
            f"{tuple(key_clean.shape)} and {tuple(key_corrupt.shape)}",
            field="key_corrupt",
        )
    d = key_clean.float() - key_corrupt.float()  # [N, L, P, d]
    return d.norm(dim=-1).mean(0)  # [L, P]


def inert_mask(n_layers: int, at_answer: list[bool]) -> np.ndarray:
    """``[L, P]`` True where a patch cannot reach the answer: the last layer's residual at a
    position other than the answer token feeds no later layer, so its effect is exactly 0."""
    mask = np.zeros((n_layers, len(at_answer)), dtype=bool)
    mask[-1] = [not a for a in at_answer]
    return mask


def select_checkpoints(
    scores: torch.Tensor | np.ndarray,
    names: list[str],
    modified: list[bool],
    k: int,
    *,
    min_modified: int = 1,
    min_unmodified: int = 1,
) -> list[Checkpoint]:
    """Top-``k`` (layer, position) by score with both kinds of position represented.

    The best ``min_modified`` modified and ``min_unmodified`` unmodified candidates are
    reserved first, the rest of the ``k`` slots go to the highest remaining scores.
    Candidates with a zero difference are never chosen (their direction is undefined), nor
    are NaN scores (used to exclude causally inert sites, see :func:`inert_mask`).
    Raises :class:`InputError` when the constraint cannot be met.
    """
    s = np.asarray(scores, dtype=np.float64)  # [L, P]
    if s.ndim != 2 or s.shape[1] != len(names) or len(modified) != len(names):
        raise InputError(
            f"expected scores [layers, {len(names)}] and one modified flag per "
            f"position, got {s.shape} and {len(modified)}",
            field="scores",
        )
    if k < min_modified + min_unmodified:
        raise InputError(f"expected k >= min_modified + min_unmodified, got k={k}", field="k")
    cands = [
        (float(s[layer, p]), layer, p)
        for layer in range(s.shape[0])
        for p in range(s.shape[1])
        if np.isfinite(s[layer, p]) and s[layer, p] > ZERO_NORM
    ]
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    chosen: list[tuple[float, int, int]] = []
    for kind, need in ((True, min_modified), (False, min_unmodified)):
        pool = [c for c in cands if modified[c[2]] is kind]
        if len(pool) < need:
            label = "modified" if kind else "unmodified"
            raise InputError(
                f"expected at least {need} {label} position(s) with a non-zero "
                f"contrastive difference, found {len(pool)}",
                field="checkpoints",
            )
        chosen += pool[:need]
    for c in cands:
        if len(chosen) >= k:
            break
        if c not in chosen:
            chosen.append(c)
    chosen.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [Checkpoint(layer, names[p], bool(modified[p]), score) for score, layer, p in chosen]
