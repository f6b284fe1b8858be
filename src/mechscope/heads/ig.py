"""Integrated gradients over head gates, for the four path families.

Each function returns a :class:`HeadAttribution`: one ``[layers, heads]`` vector and the
completeness of every path segment behind it (one segment for the joint and staggered
paths, one per layer for per-layer IG, one per sampled path for the random-threshold path).
Extra keyword arguments ``rtol``, ``atol`` and ``max_steps`` turn on step doubling for the
segments that miss completeness (:func:`~mechscope.heads.integrate.integrate_refined`);
``completeness=False`` skips the forward at the paths' ends that completeness needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from mechscope.errors import InputError
from mechscope.heads.integrate import GateFn, PathIntegrals, integrate_refined
from mechscope.heads.paths import (
    joint_path,
    layer_path,
    random_threshold_paths,
    staggered_path,
)

PathKind = Literal["joint", "per_layer", "staggered", "random"]
PATH_KINDS: tuple[str, ...] = ("joint", "per_layer", "staggered", "random")


@dataclass(frozen=True)
class HeadAttribution:
    """Head attributions ``[layers, heads]`` from one path family, with completeness.

    ``segments`` holds one integral per path; ``labels`` names them (``"all"``,
    ``"layer 3"``, ``"path 0"``). Per-layer segments are summed (each touches only its own
    layer); random-threshold segments are averaged (each is one sample of the path).
    """

    kind: str
    attributions: np.ndarray  # [layers, heads] float64
    segments: PathIntegrals
    labels: list[str]
    baseline: float

    def completeness_frame(self) -> pd.DataFrame:
        """One row per segment: f at both ends, Σ attributions, absolute and relative error.

        For the random-threshold path a ``"mean"`` row gives the completeness of the
        averaged attributions (the mean of the per-path errors).
        """
        s = self.segments
        df = pd.DataFrame(
            {
                "path": self.kind,
                "segment": self.labels,
                "f_start": s.f_start,
                "f_end": s.f_end,
                "sum_attr": s.total,
                "delta": s.delta,
                "abs_delta": np.abs(s.delta),
                "rel_delta": s.rel_delta,
                "method": s.method,
                "n_steps": s.n_steps,
            }
        )
        if self.kind == "random":
            gap = float(np.mean(s.f_end - s.f_start))
            delta = float(self.attributions.sum() - gap)
            mean = {
                "path": self.kind,
                "segment": "mean",
                "f_start": float(s.f_start.mean()),
                "f_end": float(s.f_end.mean()),
                "sum_attr": float(self.attributions.sum()),
                "delta": delta,
                "abs_delta": abs(delta),
                "rel_delta": abs(delta) / abs(gap) if gap else np.inf,
                "method": s.method,
                "n_steps": int(s.n_steps.max()),
            }
            df = pd.concat([df, pd.DataFrame([mean])], ignore_index=True)
        return df


def joint_ig(
    f: GateFn,
    *,
    baseline: float = 0.0,
    n_steps: int = 32,
    method: str = "gauss_legendre",
    internal_batch_size: int | None = None,
    **refine: float | int | None,
) -> HeadAttribution:
    """All heads on one straight path from ``baseline`` to 1 (the note's "joint IG")."""
    seg = integrate_refined(
        f,
        [joint_path(f.shape, baseline)],
        n_steps=n_steps,
        method=method,
        internal_batch_size=internal_batch_size,
        **refine,
    )
    return HeadAttribution("joint", seg.attributions[0], seg, ["all"], float(baseline))


def per_layer_ig(
    f: GateFn,
    *,
    layers: Sequence[int] | None = None,
    baseline: float = 0.0,
    n_steps: int = 32,
    method: str = "gauss_legendre",
    internal_batch_size: int | None = None,
    **refine: float | int | None,
) -> HeadAttribution:
    """One layer at a time from ``baseline`` to 1, every other layer at 1.

    Layers not in ``layers`` get attribution 0. All layers' steps share the batches, so
    the cost is ``len(layers) × n_steps`` forward+backward rows.
    """
    chosen = list(range(f.shape[0])) if layers is None else [int(x) for x in layers]
    if not chosen or len(set(chosen)) != len(chosen):
        raise InputError(f"a non-empty list of distinct layers, got {layers!r}", field="layers")
    paths = [layer_path(f.shape, layer, baseline) for layer in chosen]
    seg = integrate_refined(
        f,
        paths,
        n_steps=n_steps,
        method=method,
        internal_batch_size=internal_batch_size,
        **refine,
    )
    labels = [f"layer {layer}" for layer in chosen]
    return HeadAttribution("per_layer", seg.attributions.sum(axis=0), seg, labels, float(baseline))


def staggered_ig(
    f: GateFn,
    *,
    lambdas: Sequence[float] | None = None,
    baseline: float = 0.0,
    n_steps: int = 32,
    method: str = "gauss_legendre",
    internal_batch_size: int | None = None,
    **refine: float | int | None,
) -> HeadAttribution:
    """Layer ``l`` on ``b + t^(1+λ_l)(1 − b)`` (default ``λ_l = l / L``)."""
    path = staggered_path(f.shape, baseline, lambdas)
    seg = integrate_refined(
        f,
        [path],
        n_steps=n_steps,
        method=method,
        internal_batch_size=internal_batch_size,
        **refine,
    )
    return HeadAttribution("staggered", seg.attributions[0], seg, ["all"], float(baseline))


def random_threshold_ig(
    f: GateFn,
    *,
    n_paths: int = 8,
    window: float = 0.5,
    seed: int = 0,
    baseline: float = 0.0,
    n_steps: int = 64,
    method: str = "riemann_middle",
    internal_batch_size: int | None = None,
    **refine: float | int | None,
) -> HeadAttribution:
    """Mean IG over ``n_paths`` random-onset ramp paths (see :mod:`.paths`).

    Each head's velocity is continuous but not smooth at its window's ends, so the default
    rule is the midpoint rule (second order on piecewise-smooth integrands); Gauss-Legendre
    would lose its fast convergence across those points.
    """
    paths = random_threshold_paths(f.shape, baseline, n_paths=n_paths, window=window, seed=seed)
    seg = integrate_refined(
        f,
        paths,
        n_steps=n_steps,
        method=method,
        internal_batch_size=internal_batch_size,
        **refine,
    )
    labels = [f"path {k}" for k in range(len(paths))]
    return HeadAttribution("random", seg.attributions.mean(axis=0), seg, labels, float(baseline))


def head_ig(f: GateFn, kind: str, **options) -> HeadAttribution:
    """Dispatch by path family name (``joint``, ``per_layer``, ``staggered``, ``random``)."""
    fns = {
        "joint": joint_ig,
        "per_layer": per_layer_ig,
        "staggered": staggered_ig,
        "random": random_threshold_ig,
    }
    if kind not in fns:
        raise InputError(f"one of {', '.join(PATH_KINDS)}, got {kind!r}", field="path")
    return fns[kind](f, **options)
