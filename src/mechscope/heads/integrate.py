"""The numerical core: batched gate evaluations, gradients and path integrals.

A gate function ``f`` maps ``alpha [rows, layers, heads]`` to one scalar per row. Every node
of every path becomes one row, so all the steps of a chunk go through the model in a single
batched forward and backward (captum's ``internal_batch_size``). Rows are independent (the
model never mixes batch rows), so the gradient of ``f(alpha).sum()`` with respect to
``alpha`` is every row's own gradient at once. Rows whose paths hold the bottom layers at
one shared value (per-layer IG) are grouped so each chunk runs those layers once
(:func:`gradients`, ``needed_from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from mechscope.errors import InputError
from mechscope.heads.paths import GatePath
from mechscope.heads.quadrature import quadrature


@runtime_checkable
class GateFn(Protocol):
    """A scalar function of head gates: ``alpha [rows, layers, heads]`` -> ``[rows]``."""

    shape: tuple[int, int]

    def __call__(self, alpha: torch.Tensor) -> torch.Tensor: ...


def _batch(f: GateFn, rows: int, internal_batch_size: int | None) -> int:
    if internal_batch_size is None:
        size = getattr(f, "default_batch", None)
        return max(1, min(rows, int(size))) if size else max(rows, 1)
    if isinstance(internal_batch_size, bool) or int(internal_batch_size) < 1:
        raise InputError(
            f"an internal batch size >= 1, got {internal_batch_size!r}", field="internal_batch_size"
        )
    return int(internal_batch_size)


def _check_rows(y: torch.Tensor, rows: int) -> torch.Tensor:
    if y.shape != (rows,):
        raise InputError(
            f"the gate function to return one value per row, shape ({rows},), got {tuple(y.shape)}",
            field="objective",
        )
    return y


def evaluate(f: GateFn, alphas: torch.Tensor, internal_batch_size: int | None = None) -> np.ndarray:
    """``f`` at each gate vector of ``alphas [rows, layers, heads]``, without gradients."""
    size = _batch(f, alphas.shape[0], internal_batch_size)
    out = []
    with torch.no_grad():
        for start in range(0, alphas.shape[0], size):
            chunk = alphas[start : start + size].to(torch.float32)  # [c, L, H]
            out.append(_check_rows(f(chunk), chunk.shape[0]).double().cpu())
    return torch.cat(out).numpy() if out else np.zeros(0)


def gradients(
    f: GateFn,
    alphas: torch.Tensor,
    internal_batch_size: int | None = None,
    *,
    needed_from: np.ndarray | None = None,
) -> torch.Tensor:
    """``∂f/∂α`` at each row of ``alphas [rows, layers, heads]`` -> float64 ``[rows, L, H]``.

    ``torch.autograd.grad`` returns fresh gradients per chunk: nothing accumulates in a
    ``.grad`` field between batches, and no parameter gradient is computed.

    ``needed_from [rows]``: row ``r``'s gradient is wanted only in layers
    ``>= needed_from[r]`` (a path whose velocity is zero below that layer), and comes back
    as zeros below it. For a gate function that supports ``shared_below`` (a
    :class:`~mechscope.heads.gatefn.GateFunction`), rows are then grouped by that
    layer and each chunk runs the layers below its lowest one once, for all its rows: the
    per-layer paths' steps cost about half a full forward and backward each.
    """
    size = _batch(f, alphas.shape[0], internal_batch_size)
    rows = alphas.shape[0]
    if rows and hasattr(f, "note_chunk"):  # the memory prediction of the largest chunk
        f.note_chunk(min(size, rows))
    share = needed_from is not None and getattr(f, "shares_prefix", False)
    order = np.argsort(needed_from, kind="stable") if share else np.arange(rows)
    out = torch.zeros(rows, *alphas.shape[1:], dtype=torch.float64)
    for start in range(0, rows, size):
        idx = torch.from_numpy(order[start : start + size])
        leaf = alphas[idx].to(torch.float32).detach().requires_grad_(True)  # [c, L, H]
        with torch.enable_grad():
            if share:
                k = shared_layers(leaf.detach(), int(needed_from[idx.numpy()].min()))
                y = f(leaf, shared_below=k) if k else f(leaf)  # type: ignore[call-arg]
            else:
                y = f(leaf)
            (g,) = torch.autograd.grad(_check_rows(y, leaf.shape[0]).sum(), leaf)
        out[idx] = g.double().cpu()  # [c, L, H]
    return out


def shared_layers(alphas: torch.Tensor, needed_from: int) -> int:
    """How many bottom layers a chunk ``alphas [c, L, H]`` can run once: none past the first
    layer whose gradient is wanted, nor past the first layer where its rows' gates differ
    (and at most ``L - 1``: the top layer always runs for every row)."""
    differs = (alphas != alphas[:1]).flatten(2).any(dim=2).any(dim=0)  # [L]
    first_diff = int(differs.nonzero()[0, 0]) if bool(differs.any()) else alphas.shape[1]
    return max(0, min(needed_from, first_diff, alphas.shape[1] - 1))


def first_moving_layer(velocities: torch.Tensor) -> np.ndarray:
    """``velocities [rows, L, H]`` -> for each row the first layer with a nonzero velocity
    (``L`` for a row that does not move): below it the gradient is multiplied by zero."""
    moving = (velocities != 0).any(dim=2)  # [rows, L]
    first = torch.where(moving.any(dim=1), moving.int().argmax(dim=1), moving.shape[1])
    return first.numpy()


@dataclass(frozen=True)
class PathIntegrals:
    """IG along each of ``P`` paths: attributions and the function at both ends."""

    attributions: np.ndarray  # [P, layers, heads] float64
    f_start: np.ndarray  # [P]
    f_end: np.ndarray  # [P]
    method: str
    n_steps: np.ndarray  # [P] nodes used on each path (differs after refinement)

    @property
    def total(self) -> np.ndarray:  # [P]
        return self.attributions.sum(axis=(1, 2))

    @property
    def delta(self) -> np.ndarray:  # [P]
        """Completeness error: Σ attributions − (f(end) − f(start)) (captum's signed delta)."""
        return self.total - (self.f_end - self.f_start)

    @property
    def rel_delta(self) -> np.ndarray:  # [P]
        """``|delta| / |f(end) − f(start)|`` (inf when the two ends agree exactly; NaN when
        the ends were not evaluated)."""
        gap = np.abs(self.f_end - self.f_start)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(gap > 0, np.abs(self.delta) / gap, np.where(self.delta == 0, 0, np.inf))
        return np.where(np.isnan(gap), np.nan, rel)


def endpoint_values(
    f: GateFn, paths: Sequence[GatePath], internal_batch_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``f`` at every path's start and end, each distinct gate vector evaluated once."""
    ends = torch.stack([p.start() for p in paths] + [p.end() for p in paths])  # [2P, L, H]
    unique, inverse = torch.unique(ends, dim=0, return_inverse=True)
    values = evaluate(f, unique, internal_batch_size)[inverse.numpy()]  # [2P]
    return values[: len(paths)], values[len(paths) :]


def integrate(
    f: GateFn,
    paths: Sequence[GatePath],
    *,
    n_steps: int = 32,
    method: str = "gauss_legendre",
    internal_batch_size: int | None = None,
    completeness: bool = True,
) -> PathIntegrals:
    """Integrated gradients along each path, ``Σ_k w_k ∂f/∂α(γ(t_k)) ⊙ γ'(t_k)``.

    The ``P × n_steps`` rows of all paths are batched together in chunks of
    ``internal_batch_size`` rows (default: ``f.default_batch`` or everything at once).
    ``completeness=False`` skips the forward at the paths' ends (``f_start``, ``f_end`` and
    the completeness error are then NaN): for many cheap runs whose completeness was
    checked once; captum likewise computes it only on request.
    """
    if not paths:
        raise InputError("at least one path", field="paths")
    for p in paths:
        if tuple(p.shape) != tuple(f.shape):
            raise InputError(f"paths of shape {f.shape}, got {p.shape}", field="paths")
    quad = quadrature(method, n_steps)
    t = torch.from_numpy(quad.t)  # [n]
    w = torch.from_numpy(quad.w)  # [n]
    points, velocities = zip(*(p.points(t) for p in paths), strict=True)
    alphas = torch.cat(points)  # [P * n, L, H]
    velocity = torch.cat(velocities)  # [P * n, L, H]
    needed = first_moving_layer(velocity)  # [P * n]
    grads = gradients(f, alphas, internal_batch_size, needed_from=needed)  # [P * n, L, H]
    weighted = grads * velocity * w.repeat(len(paths))[:, None, None]
    attributions = weighted.view(len(paths), quad.n_steps, *f.shape).sum(dim=1)  # [P, L, H]
    if completeness:
        f_start, f_end = endpoint_values(f, paths, internal_batch_size)
    else:
        f_start = f_end = np.full(len(paths), np.nan)
    steps = np.full(len(paths), quad.n_steps)
    return PathIntegrals(attributions.numpy(), f_start, f_end, quad.method, steps)


def _needs_more(seg: PathIntegrals, rtol: float, atol: float) -> np.ndarray:
    gap = np.abs(seg.f_end - seg.f_start)
    return np.abs(seg.delta) > np.maximum(rtol * gap, atol)  # [P]


def integrate_refined(
    f: GateFn,
    paths: Sequence[GatePath],
    *,
    n_steps: int = 32,
    method: str = "gauss_legendre",
    internal_batch_size: int | None = None,
    rtol: float | None = None,
    atol: float = 0.0,
    max_steps: int | None = None,
    completeness: bool = True,
) -> PathIntegrals:
    """:func:`integrate`, then paths whose completeness error exceeds
    ``max(rtol · |f(end) − f(start)|, atol)`` are integrated again with twice the nodes, up to
    ``max_steps`` (default ``8 × n_steps``). Only failing paths pay for refinement; a path
    still failing at ``max_steps`` keeps its last value, and the completeness table shows it.
    """
    if rtol is not None and not completeness:
        raise InputError("refinement (rtol) needs completeness=True", field="rtol")
    seg = integrate(
        f,
        paths,
        n_steps=n_steps,
        method=method,
        internal_batch_size=internal_batch_size,
        completeness=completeness,
    )
    if rtol is None:
        return seg
    if rtol < 0 or atol < 0:
        raise InputError(f"non-negative tolerances, got rtol={rtol}, atol={atol}", field="rtol")
    cap = 8 * n_steps if max_steps is None else int(max_steps)
    attr, steps = seg.attributions.copy(), seg.n_steps.copy()
    todo = np.flatnonzero(_needs_more(seg, rtol, atol))
    n = n_steps
    while todo.size and 2 * n <= cap:
        n *= 2
        sub = integrate(
            f,
            [paths[i] for i in todo],
            n_steps=n,
            method=method,
            internal_batch_size=internal_batch_size,
        )
        attr[todo], steps[todo] = sub.attributions, n
        todo = todo[_needs_more(sub, rtol, atol)]
    return PathIntegrals(attr, seg.f_start, seg.f_end, seg.method, steps)
