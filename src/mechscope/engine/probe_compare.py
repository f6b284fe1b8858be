"""What every conformance check shares: its two outcomes besides passing, and the one
comparison with a tolerance that the model's dtype sets."""

from __future__ import annotations

import torch

from mechscope.models.loaded import LoadedModel


class ProbeFailed(AssertionError):
    """A check's identity does not hold (the message says by how much)."""


class NotApplicable(Exception):
    """A check that cannot run on this model (the message says why)."""


def tolerance(lm: LoadedModel) -> float:
    """Relative tolerance: fp32 round-off, or the half-precision model's own rounding."""
    return 1e-4 if lm.dtype == torch.float32 else 3e-2


def check_close(lm: LoadedModel, got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Raise :class:`ProbeFailed` unless ``got`` equals ``ref`` within the tolerance,
    relative to the reference's largest magnitude (at least 1)."""
    got, ref = got.float(), ref.float().to(got.device)
    if got.shape != ref.shape:
        raise ProbeFailed(f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}")
    scale = max(float(ref.abs().max()), 1.0)
    err = float((got - ref).abs().max())
    if not err <= tolerance(lm) * scale:
        raise ProbeFailed(f"{what} off by {err:.3g} (scale {scale:.3g})")
