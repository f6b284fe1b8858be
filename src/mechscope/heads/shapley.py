"""Shapley values of a chosen set of heads, by permutation sampling (and exactly, for few).

The game: ``v(T) = f(α)`` with the chosen heads in ``T`` at 1, the other chosen heads at the
baseline, and every head outside the set at 1. A random order of the chosen heads gives each
head one marginal contribution ``v(before ∪ {h}) − v(before)``; the Shapley value is their
mean over orders, and its standard error the spread over sampled orders. Antithetic sampling
pairs every order with its reverse (a variance reduction); the standard error is then taken
over pairs, the independent unit. Every coalition is evaluated once (forward passes only),
however many orders share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
import torch

from mechscope.errors import InputError
from mechscope.heads.integrate import GateFn, evaluate
from mechscope.heads.paths import check_baseline

Head = tuple[int, int]


@dataclass(frozen=True)
class ShapleyResult:
    """Shapley values ``values [k]`` of ``heads`` with standard errors ``se [k]``."""

    heads: list[Head]
    values: np.ndarray  # [k]
    se: np.ndarray  # [k] (0 for exact values)
    n_permutations: int  # 0 for exact values
    v_empty: float  # v(no chosen head on)
    v_full: float  # v(all chosen heads on)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "layer": [h[0] for h in self.heads],
                "head": [h[1] for h in self.heads],
                "shapley": self.values,
                "se": self.se,
                "n_permutations": self.n_permutations,
            }
        )


def check_heads(heads: Sequence[Sequence[int]], shape: tuple[int, int]) -> list[Head]:
    out = [(int(h[0]), int(h[1])) for h in heads]
    if not out or len(set(out)) != len(out):
        raise InputError(
            f"a non-empty list of distinct (layer, head), got {heads!r}", field="heads"
        )
    for layer, head in out:
        if not (0 <= layer < shape[0] and 0 <= head < shape[1]):
            raise InputError(
                f"heads within [{shape[0]} layers, {shape[1]} heads], got ({layer}, {head})",
                field="heads",
            )
    return out


def coalition_gates(
    shape: tuple[int, int], heads: Sequence[Head], members: np.ndarray, baseline: float
) -> torch.Tensor:
    """Gate vectors ``[R, L, H]`` for coalitions ``members [R, k]`` (True = head on)."""
    gates = torch.ones((members.shape[0], *shape), dtype=torch.float64)
    for j, (layer, head) in enumerate(heads):
        off = torch.from_numpy(~members[:, j])
        gates[off, layer, head] = baseline
    return gates


def _values(f: GateFn, heads: list[Head], members: np.ndarray, baseline: float, batch) -> dict:
    unique, inverse = np.unique(members, axis=0, return_inverse=True)
    vals = evaluate(f, coalition_gates(f.shape, heads, unique, baseline), batch)
    return {"values": vals[inverse.reshape(-1)], "unique": unique.shape[0]}


def shapley_sampled(
    f: GateFn,
    heads: Sequence[Sequence[int]],
    *,
    n_permutations: int = 64,
    baseline: float = 0.0,
    seed: int = 0,
    antithetic: bool = True,
    internal_batch_size: int | None = None,
) -> ShapleyResult:
    """Permutation-sampling Shapley values of ``heads`` with standard errors."""
    chosen = check_heads(heads, f.shape)
    b = check_baseline(baseline)
    k = len(chosen)
    if (
        isinstance(n_permutations, bool)
        or not isinstance(n_permutations, int)
        or n_permutations < 2
    ):
        raise InputError(f"n_permutations >= 2, got {n_permutations!r}", field="n_permutations")
    if antithetic and n_permutations % 2:
        raise InputError(
            f"an even n_permutations for antithetic pairs, got {n_permutations}",
            field="n_permutations",
        )
    rng = np.random.default_rng(seed)
    n_draw = n_permutations // 2 if antithetic else n_permutations
    perms = np.stack([rng.permutation(k) for _ in range(n_draw)])  # [n_draw, k]
    if antithetic:
        perms = np.stack([perms, perms[:, ::-1]], axis=1).reshape(-1, k)  # [P, k]
    # members[p, j, i]: head i is on in the prefix of length j of order p
    rank = np.argsort(perms, axis=1)  # [P, k] position of head i in order p
    members = rank[:, None, :] < np.arange(k + 1)[None, :, None]  # [P, k + 1, k]
    v = _values(f, chosen, members.reshape(-1, k), b, internal_batch_size)["values"]
    v = v.reshape(n_permutations, k + 1)  # [P, k + 1]
    gains = np.diff(v, axis=1)  # [P, k]: gain of the j-th head of order p
    marg = np.take_along_axis(gains, rank, axis=1)  # [P, k]: marginal of head i in order p
    units = marg.reshape(-1, 2, k).mean(axis=1) if antithetic else marg  # [U, k]
    se = units.std(axis=0, ddof=1) / math.sqrt(units.shape[0])
    return ShapleyResult(chosen, marg.mean(axis=0), se, n_permutations, v[0, 0], v[0, -1])


def shapley_exact(
    f: GateFn,
    heads: Sequence[Sequence[int]],
    *,
    baseline: float = 0.0,
    internal_batch_size: int | None = None,
    max_heads: int = 12,
) -> ShapleyResult:
    """Exact Shapley values by enumerating all ``2^k`` coalitions (``k <= max_heads``)."""
    chosen = check_heads(heads, f.shape)
    b = check_baseline(baseline)
    k = len(chosen)
    if k > max_heads:
        raise InputError(
            f"at most {max_heads} heads for exact Shapley values, got {k}", field="heads"
        )
    members = ((np.arange(2**k)[:, None] >> np.arange(k)[None]) & 1).astype(bool)  # [2^k, k]
    v = _values(f, chosen, members, b, internal_batch_size)["values"]
    index = {tuple(row): i for i, row in enumerate(members)}
    phi = np.zeros(k)
    for i in range(k):
        others = [j for j in range(k) if j != i]
        for size in range(k):
            weight = math.factorial(size) * math.factorial(k - size - 1) / math.factorial(k)
            for subset in combinations(others, size):
                row = np.zeros(k, dtype=bool)
                row[list(subset)] = True
                without = v[index[tuple(row)]]
                row[i] = True
                phi[i] += weight * (v[index[tuple(row)]] - without)
    return ShapleyResult(chosen, phi, np.zeros(k), 0, float(v[0]), float(v[-1]))
