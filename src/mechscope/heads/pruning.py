"""Validation by pruning: does removing "unimportant" heads first really hurt least?

Heads are masked (gate 0) cumulatively in an order: least important first, most important
first, and several random orders as the reference. At each step the objective and the task
accuracy are measured on every sample. A useful importance ranking keeps the objective good
longer than random when removing least-important heads first, and breaks it sooner than
random when removing most-important heads first. The area under each curve (normalised by
the removed fraction's range, i.e. the curve's average level) summarises it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from mechscope.errors import InputError
from mechscope.heads.gatefn import GateFunction
from mechscope.progress import track
from mechscope.stats import curve_ci
from mechscope.stats.finite import require_finite


def keep_one_per_layer(order: np.ndarray, n_heads: int) -> np.ndarray:
    """Drop from a removal order each layer's last head, so no layer is ever emptied."""
    order = np.asarray(order)
    last = {}
    for pos, idx in enumerate(order):
        last[int(idx) // n_heads] = pos
    keep = np.ones(order.shape[0], dtype=bool)
    keep[list(last.values())] = False
    return order[keep]


def pruning_orders(
    importance: np.ndarray,
    *,
    n_random: int = 3,
    seed: int = 0,
    one_per_layer: bool = False,
) -> dict[str, np.ndarray]:
    """Removal orders of flat head indices (``layer * heads + head``) by name.

    ``least_first`` / ``most_first`` sort by ``importance [L, H]`` (higher = more important;
    ties keep index order); ``random_<i>`` are seeded permutations.
    """
    imp = np.asarray(importance, dtype=np.float64)
    if imp.ndim != 2 or not np.all(np.isfinite(imp)):
        raise InputError(
            f"a finite [layers, heads] importance, got shape {imp.shape}", field="importance"
        )
    if isinstance(n_random, bool) or not isinstance(n_random, int) or n_random < 0:
        raise InputError(f"n_random >= 0, got {n_random!r}", field="n_random")
    flat = imp.reshape(-1)
    orders = {
        "least_first": np.argsort(flat, kind="stable"),
        "most_first": np.argsort(-flat, kind="stable"),
    }
    rng = np.random.default_rng(seed)
    for i in range(n_random):
        orders[f"random_{i}"] = rng.permutation(flat.shape[0])
    if one_per_layer:
        orders = {k: keep_one_per_layer(v, imp.shape[1]) for k, v in orders.items()}
    return orders


def removal_gates(shape: tuple[int, int], order: np.ndarray, counts: Sequence[int]) -> torch.Tensor:
    """Gates ``[len(counts), L, H]``: row ``i`` has the first ``counts[i]`` heads of
    ``order`` at 0."""
    gates = torch.ones((len(counts), shape[0] * shape[1]))
    for i, c in enumerate(counts):
        gates[i, torch.as_tensor(np.asarray(order[:c], dtype=np.int64))] = 0.0
    return gates.view(len(counts), *shape)


def _kind(name: str) -> str:
    return "random" if name.startswith("random") else name


def pruning_curves(
    fs: Sequence[GateFunction],
    orders: dict[str, np.ndarray],
    *,
    n_points: int = 11,
    max_fraction: float = 1.0,
    batch: int | None = None,
) -> pd.DataFrame:
    """Objective and accuracy of every sample after removing ``n_removed`` heads per order.

    The removal counts are ``n_points`` evenly spaced values from 0 to ``max_fraction`` of
    all heads (at most the longest order); ``fraction`` is relative to all heads. Identical
    gate vectors (e.g. 0 removed) are evaluated once per sample.
    """
    if not fs or not orders:
        raise InputError("at least one sample and one order", field="samples")
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
        raise InputError(f"n_points >= 2, got {n_points!r}", field="n_points")
    shape = fs[0].shape
    total = shape[0] * shape[1]
    if not 0.0 < float(max_fraction) <= 1.0:
        raise InputError(f"max_fraction in (0, 1], got {max_fraction!r}", field="max_fraction")
    last = min(max(len(o) for o in orders.values()), round(max_fraction * total))
    counts = sorted({round(c) for c in np.linspace(0, last, n_points)})
    names, rows = [], []
    for name, order in orders.items():
        valid = [c for c in counts if c <= len(order)]
        rows.append(removal_gates(shape, order, valid))
        names += [(name, c) for c in valid]
    gates = torch.cat(rows)  # [orders * points, L, H]
    unique, inverse = torch.unique(gates, dim=0, return_inverse=True)
    frames = []
    for f in track(fs, "pruning curves"):
        value, acc = f.metrics(unique, batch)
        require_finite(
            value, "the objective after removing heads", sample=f.sample_id, layer_axis=None
        )
        value, acc = value[inverse.numpy()], acc[inverse.numpy()]
        frames.append(
            pd.DataFrame(
                {
                    "sample_id": f.sample_id,
                    "order": [n for n, _ in names],
                    "kind": [_kind(n) for n, _ in names],
                    "n_removed": [c for _, c in names],
                    "fraction": [c / total for _, c in names],
                    "objective": value,
                    "accuracy": acc,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def pruning_auc(curves: pd.DataFrame) -> pd.DataFrame:
    """Per order: the average level (normalised area) of the sample-mean objective and
    accuracy curves over the removed fraction."""
    out = []
    for name, grp in curves.groupby("order", sort=False):
        mean = grp.groupby("fraction")[["objective", "accuracy"]].mean().sort_index()
        x = mean.index.to_numpy()
        width = x[-1] - x[0] if x[-1] > x[0] else 1.0
        out.append(
            {
                "order": name,
                "kind": _kind(str(name)),
                "auc_objective": float(np.trapezoid(mean["objective"].to_numpy(), x) / width),
                "auc_accuracy": float(np.trapezoid(mean["accuracy"].to_numpy(), x) / width),
            }
        )
    return pd.DataFrame(out)


def curve_bands(curves: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """Mean and bootstrap 95% band across samples for each order, fraction and metric.

    Random orders are pooled into one ``random`` curve (mean over orders per sample first).
    """
    pooled = curves.groupby(["kind", "sample_id", "fraction"], as_index=False)[
        ["objective", "accuracy"]
    ].mean()
    out = []
    for kind, grp in pooled.groupby("kind", sort=False):
        for metric in ("objective", "accuracy"):
            wide = grp.pivot(index="sample_id", columns="fraction", values=metric)
            wide = wide.dropna(axis=1)
            x = wide.to_numpy()  # [samples, points]
            if x.shape[0] >= 2:
                ci = curve_ci(x, seed=seed, n_resamples=1000)
                mean, low, high = ci.mean, ci.low, ci.high
            else:
                mean = low = high = x[0]
            out.append(
                pd.DataFrame(
                    {
                        "kind": kind,
                        "metric": metric,
                        "fraction": wide.columns.to_numpy(),
                        "mean": mean,
                        "low": low,
                        "high": high,
                    }
                )
            )
    return pd.concat(out, ignore_index=True)
