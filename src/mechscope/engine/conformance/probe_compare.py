"""What every conformance check shares: its two outcomes besides passing, and the one
comparison, whose tolerance is what rounding alone explains (:mod:`mechscope.tolerance`:
``K · eps · scale · √depth`` in the model's dtype)."""

from __future__ import annotations

import torch

from mechscope.models.loaded import LoadedModel
from mechscope.tolerance import rounding_margin


class ProbeFailed(AssertionError):
    """A check's identity does not hold (the message says by how much)."""


class NotApplicable(Exception):
    """A check that cannot run on this model (the message says why)."""


def check_close(
    lm: LoadedModel,
    got: torch.Tensor,
    ref: torch.Tensor,
    what: str,
    *,
    depth: int,
    scale: float | None = None,
) -> float:
    """Raise :class:`ProbeFailed` unless ``got`` equals ``ref`` within rounding (``depth``
    stages at ``scale``, by default the values' own); return the error as a fraction of the
    tolerance (the check's margin)."""
    if got.shape != ref.shape:
        raise ProbeFailed(f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}")
    err, tol = rounding_margin(got.float(), ref.float(), depth, scale=scale, dtype=lm.dtype)
    if not err <= tol:
        raise ProbeFailed(
            f"{what} off by {err:.3g}, {err / tol:.3g} times what rounding explains ({tol:.3g})"
        )
    return err / tol if tol > 0 else 0.0
