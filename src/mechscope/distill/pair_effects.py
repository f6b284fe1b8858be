"""Per-pair results of a trial, and method differences with intervals over pairs and seeds.

A trial keeps, per test pair and checkpoint, the teacher's and the student's patch effect
and the student's clean logit difference (``tables/pairs``, :func:`pair_table`), so that
accuracy and consistency can be recomputed on any resample of the pairs. The study's
method differences (:func:`~mechscope.distill.intervals.method_contrasts`) then get a
second interval, ``boot_low``/``boot_high``: a bootstrap over seeds and, within each seed,
test pairs (:func:`~mechscope.distill.resample.seed_pair_interval`), next to the Student-t
interval over seeds alone. Trials of one task share their test pairs, so a difference is
paired by seed *and* by pair: both methods are read on the same resampled pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import torch

from mechscope.distill.resample import pearson_or_nan, seed_pair_interval

#: Metrics a trial's per-pair table can recompute on resampled pairs.
PAIR_METRICS = ("accuracy", "consistency", "consistency_mean")


def pair_table(
    delta_t: torch.Tensor | np.ndarray,
    delta_s: torch.Tensor | np.ndarray,
    ld: torch.Tensor | np.ndarray,
) -> pd.DataFrame:
    """Long table, one row per (checkpoint, pair): ``checkpoint``, ``pair``,
    ``delta_teacher``, ``delta_student`` (``[K, N]`` each) and the student's clean logit
    difference ``ld`` (``[N]``, repeated per checkpoint)."""
    t = np.asarray(delta_t, dtype=np.float64)
    s = np.asarray(delta_s, dtype=np.float64)
    k, n = t.shape
    return pd.DataFrame(
        {
            "checkpoint": np.repeat(np.arange(k), n),
            "pair": np.tile(np.arange(n), k),
            "delta_teacher": t.ravel(),
            "delta_student": s.ravel(),
            "ld": np.tile(np.asarray(ld, dtype=np.float64), k),
        }
    )


def pair_arrays(table: pd.DataFrame) -> dict[str, np.ndarray]:
    """``{"delta_t": [K, N], "delta_s": [K, N], "ld": [N]}`` back from :func:`pair_table`."""
    t = table.sort_values(["checkpoint", "pair"])
    k, n = t["checkpoint"].nunique(), t["pair"].nunique()
    return {
        "delta_t": t["delta_teacher"].to_numpy(np.float64).reshape(k, n),
        "delta_s": t["delta_student"].to_numpy(np.float64).reshape(k, n),
        "ld": t["ld"].to_numpy(np.float64)[:n],
    }


def pair_metric(metric: str, arrays: Mapping[str, np.ndarray], idx: np.ndarray) -> float:
    """``metric`` of one trial on the pairs ``idx`` (repeats allowed): accuracy (share of
    positive logit differences), pooled or per-checkpoint-mean Pearson of the effects."""
    if metric == "accuracy":
        return float(np.mean(arrays["ld"][idx] > 0))
    t, s = arrays["delta_t"][:, idx], arrays["delta_s"][:, idx]  # [K, n]
    if metric == "consistency":
        return pearson_or_nan(t.ravel(), s.ravel())
    per = [pearson_or_nan(t[k], s[k]) for k in range(t.shape[0])]
    return float(np.nanmean(per)) if np.isfinite(per).any() else float("nan")


def _difference(
    metric: str, a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]
) -> Callable[[np.ndarray], float]:
    return lambda idx: pair_metric(metric, a, idx) - pair_metric(metric, b, idx)


def with_pair_intervals(
    contrasts: pd.DataFrame,
    trials: pd.DataFrame,
    pairs: Mapping[str, pd.DataFrame],
    *,
    seed: int = 0,
) -> pd.DataFrame:
    """``contrasts`` with ``boot_low``/``boot_high``: the seed × pair bootstrap interval of
    each accuracy and consistency difference whose trials all kept their per-pair table
    (``pairs``: trial name → :func:`pair_table`); NaN for the others (trials of an older
    study, other metrics)."""
    out = contrasts.copy()
    out["boot_low"], out["boot_high"] = np.nan, np.nan
    if out.empty or not pairs:
        return out
    cache: dict[str, dict[str, np.ndarray]] = {}

    def arrays(name: str) -> dict[str, np.ndarray]:
        if name not in cache:
            cache[name] = pair_arrays(pairs[name])
        return cache[name]

    index = trials.set_index(["student", "task", "method", "seed"])["trial"].sort_index()
    for i, r in out.iterrows():
        if r.metric not in PAIR_METRICS:
            continue
        a = index.loc[(r.student, r.task, r.method)]
        b = index.loc[(r.student, r.task, r.reference)]
        seeds = [s for s in a.index if s in b.index]
        names = [(a.loc[s], b.loc[s]) for s in seeds]
        if not seeds or any(x not in pairs or y not in pairs for x, y in names):
            continue
        if any(arrays(x)["ld"].size != arrays(y)["ld"].size for x, y in names):
            continue  # not the same test pairs: no pairing by pair
        per_seed = [_difference(r.metric, arrays(x), arrays(y)) for x, y in names]
        n_pairs = [arrays(x)["ld"].size for x, _ in names]
        out.loc[i, ["boot_low", "boot_high"]] = seed_pair_interval(per_seed, n_pairs, seed=seed)
    return out
