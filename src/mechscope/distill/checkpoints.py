"""Causal checkpoint search: where in the teacher does the contrast live?

Every (layer, key position) is scored by the mean norm of the contrastive difference
``d = h_clean - h_corrupt`` of ``resid_post`` over the training pairs. The top ``k`` become
checkpoints, under a diversity constraint: *modified* positions (their token differs between
clean and corrupt; low layers there only restate the embedding change) and *unmodified*
positions (same token; any difference was carried there by the model's own processing, the
cleaner signal) must both be represented.

A large difference is not yet a causal site: at a modified position the token's own
difference persists to the last layer (and residual norms grow with depth), long after later
positions have read what they need from it. In SmolLM2-135M on IOI the S2 difference is
largest at layers 26-29, where patching it moves the logit difference by 0-2 % of its clean
value; the information left S2 at layers 19-23. An optional ``accept(layer, position)``
test (the teacher's own patch effect, :mod:`mechscope.distill.screen`) skips such sites.
"""

from __future__ import annotations

from collections.abc import Callable
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
    accept: Callable[[int, int], bool] | None = None,
) -> list[Checkpoint]:
    """Top-``k`` (layer, position) by score with both kinds of position represented.

    The best ``min_modified`` modified and ``min_unmodified`` unmodified candidates are
    reserved first, the rest of the ``k`` slots go to the highest remaining scores.
    Candidates with a zero difference are never chosen (their direction is undefined), nor
    are NaN scores (used to exclude causally inert sites, see :func:`inert_mask`), nor
    candidates ``accept(layer, position index)`` rejects. ``accept`` is called lazily, in
    score order, at most once per candidate, so an expensive test (a patched forward pass)
    runs only on the few sites the selection reaches. Raises :class:`InputError` when the
    constraint cannot be met.
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
    verdicts: dict[tuple[int, int], bool] = {}

    def ok(c: tuple[float, int, int]) -> bool:
        if accept is None:
            return True
        if (c[1], c[2]) not in verdicts:
            verdicts[c[1], c[2]] = bool(accept(c[1], c[2]))
        return verdicts[c[1], c[2]]

    chosen: list[tuple[float, int, int]] = []
    for kind, need in ((True, min_modified), (False, min_unmodified)):
        pool = []
        for c in cands:
            if len(pool) >= need:
                break
            if modified[c[2]] is kind and ok(c):
                pool.append(c)
        if len(pool) < need:
            label = "modified" if kind else "unmodified"
            causal = " that the teacher responds to when patched" if accept is not None else ""
            raise InputError(
                f"expected at least {need} {label} position(s) with a non-zero "
                f"contrastive difference{causal}, found {len(pool)}",
                field="checkpoints",
            )
        chosen += pool
    for c in cands:
        if len(chosen) >= k:
            break
        if c not in chosen and ok(c):
            chosen.append(c)
    chosen.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [Checkpoint(layer, names[p], bool(modified[p]), score) for score, layer, p in chosen]
