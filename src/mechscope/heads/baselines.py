"""Cheap baselines to compare IG with: gradient × activation and head-mask importance.

At gates ``α = 1`` the gradient of the objective with respect to head ``h``'s gate equals
``Σ_{pos, d} ∂f/∂z_h · z_h`` by the chain rule (``z_h`` is scaled by ``α_h``), so the gate
gradient *is* gradient × activation on ``z`` summed over positions and dimensions. It is the
first-order Taylor estimate of what removing the head changes, and IG with one Riemann-right
step from ``α = 0``. Michel et al. (2019, "Are Sixteen Heads Really Better than One?") rank
heads by the expected *absolute* head-mask gradient and normalise each layer's scores by
their ℓ2 norm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from mechscope.errors import InputError
from mechscope.heads.integrate import GateFn, gradients
from mechscope.progress import track


def gate_gradients(fs: Sequence[GateFn], *, description: str = "gate gradients") -> np.ndarray:
    """``∂f/∂α`` at all gates 1 for each sample (= gradient × activation): ``[n, L, H]``.

    Each sample gets a fresh gradient (``torch.autograd.grad``), so nothing from one batch
    leaks into the next, the bug of accumulating ``head_mask.grad`` across batches.
    """
    if not fs:
        raise InputError("at least one sample", field="samples")
    out = []
    for f in track(fs, description):
        ones = torch.ones((1, *f.shape))  # [1, L, H]
        out.append(gradients(f, ones, 1)[0].numpy())
    return np.stack(out)  # [n, L, H]


def normalize_layers(scores: np.ndarray, how: Literal["l2", "none"] = "l2") -> np.ndarray:
    """Divide each layer's head scores by their ℓ2 norm (Michel et al.); zero layers stay 0."""
    if how == "none":
        return np.asarray(scores, dtype=np.float64)
    if how != "l2":
        raise InputError(f"'l2' or 'none', got {how!r}", field="normalize")
    x = np.asarray(scores, dtype=np.float64)  # [..., L, H]
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def head_mask_importance(
    grads: np.ndarray, *, normalize: Literal["l2", "none"] = "l2"
) -> np.ndarray:
    """Michel et al.'s importance ``E_x |∂L/∂ξ_h|`` from per-sample gate gradients
    ``[n, L, H]``, then per-layer ℓ2 normalisation -> ``[L, H]``."""
    g = np.asarray(grads, dtype=np.float64)
    if g.ndim != 3:
        raise InputError(f"per-sample gradients [n, layers, heads], got {g.shape}", field="grads")
    return normalize_layers(np.abs(g).mean(axis=0), normalize)
