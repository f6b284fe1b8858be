"""How far two correct computations of the same numbers may differ: rounding alone.

The engine and transformers' eager code, a resumed pass and a full one, this CPU's BLAS and
another's: each adds the same terms in its own order, and every partial sum is rounded. The
difference two correct computations may show is

    tol = K · eps · scale · √depth

- ``eps``: the machine epsilon of the dtype the computation rounds in (fp32: 2⁻²³ ≈ 1.2e-7,
  bf16: 2⁻⁷).
- ``scale``: the largest magnitude the rounding acted on. For a pass's outputs (logits, the
  residual stream) it is the compared values themselves, taken from both sides so that an
  all-zero reference does not ask for bit-identity. Where the compared value is a small
  difference of large terms it is the terms: ``resid_post − resid_pre`` is rounded at the
  residual stream's magnitude, not at the difference's (SmolLM2's residual reaches 9e3 while
  one layer writes 20). Attention probabilities inherit the absolute error of their scores
  (``δp_j = p_j·(δs_j − Σ_k p_k·δs_k)``, so ``|δp| ≤ 2·max|δs|``): their scale is the
  largest |score| (:func:`score_scale`).
- ``depth``: the number of stages whose rounding errors add up (:func:`pass_depth`: a site
  of layer ``l`` is ``l + 1`` deep, the logits ``n_layers + 1``, one module recomputed on the
  same input is 1). Errors of independent stages add like a random walk, hence ``√depth``.
- ``K``: what one stage may contribute, in units of ``eps · scale`` (:data:`K`). A stage of
  an fp32 model reorders fp32
  sums of hundreds to thousands of terms in several matmuls: the conformance checks needed
  at most 6.8 (Gemma 3 270M, suppression against eager with a 4-D mask, with torch's
  generic CPU kernels), over tiny models of 15 families, stories260K, SmolLM2 and Gemma 3
  under MKL's and torch's other code paths and thread counts; the Intel Xeon run that
  failed the former absolute 1e-4 needed 2.3. K = 32, about five times the most measured.
  A half-precision stage stores each result rounded to its own dtype while its sums
  accumulate in fp32, so that rounding dominates: at most 1.6 measured (Gemma 3 in bf16,
  the same check and kernels), K = 4.

A real error is far outside. A suppressed span one key off or a gate on the neighbouring
head moves the compared logits by 1.6·10⁵ to 4·10⁶ times ``eps · scale · √depth`` in fp32
(tiny models and Gemma 3: tests/engine/test_tolerance_power.py and
test_conformance_gemma3.py). In half precision the same mistakes measure 6 to 30 times on
small models: within a few roundings of what the model itself can resolve, which is why K
cannot be larger there.
"""

from __future__ import annotations

import math

import numpy as np
import torch

#: Per-stage rounding allowance in units of ``eps · scale`` (see the module docstring).
K: dict[torch.dtype, float] = {
    torch.float64: 32.0,
    torch.float32: 32.0,
    torch.bfloat16: 4.0,
    torch.float16: 4.0,
}

Array = torch.Tensor | np.ndarray


def eps(dtype: torch.dtype = torch.float32) -> float:
    """Machine epsilon of ``dtype`` (the gap between 1 and the next number)."""
    return float(torch.finfo(dtype).eps)


def pass_depth(n_layers: int, layer: int | None = None) -> int:
    """Stages a value has gone through: ``layer + 1`` for a site of that layer, and
    ``n_layers + 1`` for the logits (``layer=None``: every layer and the head)."""
    return n_layers + 1 if layer is None else layer + 1


def rounding_tolerance(scale: float, depth: int, dtype: torch.dtype = torch.float32) -> float:
    """``K · eps · scale · √depth``: the largest difference rounding alone explains."""
    return K[dtype] * eps(dtype) * scale * math.sqrt(max(depth, 1))


def _abs_max(t: Array) -> float:
    """The largest finite magnitude of ``t`` below half the dtype's range (mask fills such
    as ``finfo.min`` and infinities are not values), 0 for none."""
    a = t.detach().double().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, float)
    a = np.abs(a[np.isfinite(a)])
    a = a[a < np.finfo(np.float32).max / 2]
    return float(a.max()) if a.size else 0.0


def scale_of(*values: Array) -> float:
    """The largest magnitude over ``values`` (each a tensor or an array)."""
    return max((_abs_max(v) for v in values), default=0.0)


def score_scale(scores: Array) -> float:
    """The scale of attention probabilities: their scores' largest magnitude (masked
    entries left out), at least 1 (the probabilities' own magnitude)."""
    return max(_abs_max(scores), 1.0)


def logprob_scale(logit_scale: float, vocab: int) -> float:
    """The scale of a log-probability ``z_t − lse(z)`` (or an NLL) read off logits of
    largest magnitude ``S``: the logit's, plus the log-sum-exp's, ``≤ S + log(vocab)``."""
    return 2 * logit_scale + math.log(vocab)


def divergence_scale(logit_scale: float, vocab: int) -> float:
    """The scale of a divergence (KL, JS) between two distributions read off logits of
    largest magnitude ``S``: ``Σ|δp|·|lp − lq| + Σ p·|δlq|``, with ``Σ|δp| ≤ 2·max|δz|``,
    ``|lp − lq| ≤ 4·S`` and ``|δlq|`` a log-probability's error."""
    return 2 * logprob_scale(logit_scale, vocab) * (1 + 4 * logit_scale)


def divergence_bound(ref: Array, logit_scale: float, depth: int, *, js: bool = False) -> np.ndarray:
    """Per entry, how far a divergence ``D`` between two distributions may move when each
    side's logits (largest magnitude ``logit_scale``) carry rounding ``t``: to first order
    by ``2·t·‖p − q‖₁``, with Pinsker's ``‖p − q‖₁ ≤ √(2·KL)`` (``2·√(2·JS)`` for JS), plus
    ``t²``, the second-order floor where ``p ≈ q``. ``ref``: the reference divergences."""
    t = rounding_tolerance(logit_scale, depth)
    d = np.maximum(np.nan_to_num(np.asarray(ref, dtype=np.float64)), 0.0)
    l1 = 2 * np.sqrt(2 * d) if js else np.sqrt(2 * d)
    return 2 * t * l1 + t**2


def rounding_margin(
    got: Array,
    ref: Array,
    depth: int,
    *,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[float, float]:
    """``(largest |got − ref|, tolerance)``; ``scale`` defaults to the largest magnitude of
    either side. Entries equal on both sides (NaN and infinities included) count as equal;
    NaN on one side only is an error of infinite size."""
    g = got.detach().double().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    r = ref.detach().double().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    g, r = np.broadcast_arrays(np.asarray(g, float), np.asarray(r, float))
    same = (g == r) | (np.isnan(g) & np.isnan(r))  # equal infinities (masks) included
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(g - r))
    err = float(np.nan_to_num(diff, nan=np.inf, posinf=np.inf).max()) if diff.size else 0.0
    s = scale_of(g, r) if scale is None else scale
    return err, rounding_tolerance(s, depth, dtype)


def rounding_close(
    got: Array,
    ref: Array,
    depth: int,
    *,
    scale: float | Array | None = None,
    dtype: torch.dtype = torch.float32,
) -> bool:
    """Whether ``got`` equals ``ref`` up to rounding alone (:func:`rounding_margin`): the
    check to write instead of ``torch.allclose(a, b, atol=1e-4)``, whose bare number holds on
    one processor's kernels and not the next. ``depth``: the stages the values went through
    (:func:`pass_depth`); ``scale``: the magnitude rounding acted on (default: the compared
    values; the logits for a logit difference), a number or a tensor whose largest entry it
    is."""
    s = scale if scale is None or isinstance(scale, float | int) else scale_of(scale)
    err, tol = rounding_margin(got, ref, depth, scale=s, dtype=dtype)
    return err <= tol
