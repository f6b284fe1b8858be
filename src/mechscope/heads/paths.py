"""Paths of head gates α(t), t in [0, 1], from a baseline to "all heads on".

Integrated gradients along a path γ is the line integral
``IG_i = ∫ ∂f/∂α_i(γ(t)) · γ_i'(t) dt``; by the fundamental theorem for line integrals the
attributions sum to ``f(γ(1)) − f(γ(0))`` for *any* path, straight or not. That is why every
path here returns its velocity ``γ'(t)`` with its points: on a curved path the gradient must be
multiplied by the path derivative, not by ``(1 − b)``.

The paths differ in *which interactions* the gradient sees:

- joint: all heads move together on the diagonal, so each gradient is measured while every
  other head is partly off (the note's finding: a generic, sample-independent ranking);
- per-layer: one layer moves, all other layers stay at 1 (each head's effect in a working
  network);
- layer-staggered: layer ``l`` follows ``b + t^(1+λ_l) (1 − b)``, so early layers switch on
  before late ones;
- random-threshold: each head moves from ``b`` to 1 over its own window starting at a random
  onset; a narrow window approaches a random head order (a permutation sample of Shapley
  values), a window of 1 is the joint path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mechscope.errors import InputError


def check_baseline(baseline: float) -> float:
    """A gate baseline must lie in [0, 1): 1 would make the path a single point."""
    b = float(baseline)
    if not 0.0 <= b < 1.0:
        raise InputError(f"a baseline in [0, 1), got {baseline!r}", field="baseline")
    return b


@dataclass(frozen=True, eq=False)
class GatePath:
    """A path of gate vectors; subclasses give points and velocities at nodes ``t [n]``."""

    shape: tuple[int, int]  # (layers, heads)

    def points(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(α(t), α'(t))``, both ``[n, layers, heads]`` float64."""
        raise NotImplementedError

    def start(self) -> torch.Tensor:  # [layers, heads]
        return self.points(torch.zeros(1, dtype=torch.float64))[0][0]

    def end(self) -> torch.Tensor:  # [layers, heads]
        return self.points(torch.ones(1, dtype=torch.float64))[0][0]


@dataclass(frozen=True, eq=False)
class StraightPath(GatePath):
    """``α(t) = s + t (e − s)``: the joint path (s = b everywhere) and per-layer paths."""

    start_gate: torch.Tensor  # [layers, heads]
    end_gate: torch.Tensor  # [layers, heads]

    def points(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.start_gate.double()[None]  # [1, L, H]
        d = (self.end_gate.double() - self.start_gate.double())[None]  # [1, L, H]
        t = t.double()[:, None, None]  # [n, 1, 1]
        return s + t * d, d.expand(t.shape[0], -1, -1)


@dataclass(frozen=True, eq=False)
class PowerPath(GatePath):
    """``α(t) = b + t^p (1 − b)`` with one exponent ``p >= 1`` per head (layer-staggered)."""

    baseline: float
    exponents: torch.Tensor  # [layers, heads]

    def points(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.exponents.double()[None]  # [1, L, H]
        t = t.double()[:, None, None]  # [n, 1, 1]
        span = 1.0 - self.baseline
        return self.baseline + t.pow(p) * span, p * t.pow(p - 1.0) * span


@dataclass(frozen=True, eq=False)
class RampPath(GatePath):
    """Head ``i`` moves from ``b`` to 1 over ``[onset_i, onset_i + window]`` along the
    smoothstep ``s(u) = 3u² − 2u³``.

    A linear ramp would make the velocity jump at both ends of every head's window, and a
    quadrature rule converges only as ``1/n`` across jumps; the smoothstep's velocity
    ``6u(1 − u) / window`` is continuous (zero at the ends), so the midpoint rule keeps its
    ``1/n²`` rate. The path still leaves ``b`` exactly at the onset and reaches 1 at its end.
    """

    baseline: float
    onsets: torch.Tensor  # [layers, heads], in [0, 1 − window]
    window: float

    def points(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = (t.double()[:, None, None] - self.onsets.double()[None]) / self.window  # [n, L, H]
        u = u.clamp(0.0, 1.0)
        span = 1.0 - self.baseline
        alpha = self.baseline + (3.0 - 2.0 * u) * u * u * span
        return alpha, 6.0 * u * (1.0 - u) * (span / self.window)


# --------------------------------------------------------------------------------------------
def joint_path(shape: tuple[int, int], baseline: float = 0.0) -> StraightPath:
    """All heads from ``baseline`` to 1 together (the diagonal)."""
    b = check_baseline(baseline)
    return StraightPath(
        shape, torch.full(shape, b, dtype=torch.float64), torch.ones(shape, dtype=torch.float64)
    )


def layer_path(shape: tuple[int, int], layer: int, baseline: float = 0.0) -> StraightPath:
    """Layer ``layer``'s heads from ``baseline`` to 1; every other layer stays at 1."""
    b = check_baseline(baseline)
    if not 0 <= layer < shape[0]:
        raise InputError(f"a layer in 0..{shape[0] - 1}, got {layer}", field="layers")
    start = torch.ones(shape, dtype=torch.float64)
    start[layer] = b
    return StraightPath(shape, start, torch.ones(shape, dtype=torch.float64))


def staggered_path(
    shape: tuple[int, int], baseline: float = 0.0, lambdas: Sequence[float] | None = None
) -> PowerPath:
    """Layer ``l`` follows ``b + t^(1+λ_l)(1 − b)``; default ``λ_l = l / L``."""
    b = check_baseline(baseline)
    n_layers, n_heads = shape
    lam = np.arange(n_layers) / n_layers if lambdas is None else np.asarray(lambdas, float)
    if lam.shape != (n_layers,) or not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise InputError(
            f"{n_layers} finite non-negative λ values (one per layer), got {list(np.ravel(lam))}",
            field="lambdas",
        )
    exps = torch.tensor(1.0 + lam, dtype=torch.float64)[:, None].expand(n_layers, n_heads)
    return PowerPath(shape, b, exps.clone())


def random_threshold_paths(
    shape: tuple[int, int],
    baseline: float = 0.0,
    *,
    n_paths: int = 8,
    window: float = 0.5,
    seed: int = 0,
) -> list[RampPath]:
    """``n_paths`` ramp paths with onsets drawn uniformly in ``[0, 1 − window]`` (seeded)."""
    b = check_baseline(baseline)
    if isinstance(n_paths, bool) or not isinstance(n_paths, int) or n_paths < 1:
        raise InputError(f"an integer number of paths >= 1, got {n_paths!r}", field="n_paths")
    if not 0.0 < float(window) <= 1.0:
        raise InputError(f"a window in (0, 1], got {window!r}", field="window")
    gen = torch.Generator().manual_seed(int(seed))
    onsets = torch.rand((n_paths, *shape), generator=gen, dtype=torch.float64) * (1.0 - window)
    return [RampPath(shape, b, onsets[k], float(window)) for k in range(n_paths)]
