"""Two-level bootstraps: intervals that include the sampling of test pairs and of clusters.

The Student-t intervals of :mod:`mechscope.distill.intervals` are over training seeds with
the task's test pairs fixed; they leave out how a result would move on other pairs of the
task (about ±0.04 on an accuracy over 64 pairs). Experiment 3's students are clustered in
methods: students of one method share their loss, so treating them as independent draws
makes an interval too narrow. Both call for the same resampling (Davison & Hinkley 1997,
§3.8; Field & Welsh 2007): draw outer units (seeds; methods) with replacement, then inner
units (pairs of that seed; students of that method) with replacement within each drawn
outer unit, recompute the statistic, and read the interval off the percentiles of the
resampled statistics.

Resampling both levels double-counts the inner noise a little (the spread between seeds
already holds some of it), so the interval is conservative, which is the side a reviewer
accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mechscope.distill.intervals import LEVEL
from mechscope.errors import InputError

#: Resamples of every two-level bootstrap.
N_RESAMPLES = 2000

#: One resample: ``(outer unit, inner indices)`` per draw of an outer unit.
Draw = list[tuple[int, np.ndarray]]


def two_level_draw(rng: np.random.Generator, sizes: Sequence[int]) -> Draw:
    """Outer units drawn with replacement (as many as there are), and for each drawn unit
    ``j`` its ``sizes[j]`` inner indices drawn with replacement."""
    outer = rng.integers(len(sizes), size=len(sizes))
    return [(int(j), rng.integers(sizes[j], size=sizes[j])) for j in outer]


def two_level_bootstrap(
    sizes: Sequence[int],
    statistic: Callable[[Draw], float],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """``[n_resamples]`` values of ``statistic`` over two-level resamples
    (:func:`two_level_draw`); NaN where a resample leaves it undefined."""
    if not sizes or min(sizes) < 1:
        raise InputError(f"expected outer units of at least one inner unit, got {sizes}")
    rng = np.random.default_rng(seed)
    return np.array([statistic(two_level_draw(rng, sizes)) for _ in range(n_resamples)])


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the finite resampled values (NaN when fewer than half are
    finite: the statistic is mostly undefined, so no interval is honest)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size < max(2, np.asarray(values).size / 2):
        return float("nan"), float("nan")
    low, high = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def seed_pair_interval(
    per_seed: Sequence[Callable[[np.ndarray], float]],
    n_pairs: Sequence[int],
    *,
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval of a mean over seeds of a per-seed statistic of the test pairs.

    ``per_seed[s](idx)`` is seed ``s``'s statistic on pairs ``idx`` (for a difference
    between methods, both methods' values on the *same* pairs: the difference stays paired
    by seed and by pair). Seeds are drawn with replacement, then each drawn seed's pairs.
    """
    if len(per_seed) != len(n_pairs):
        raise InputError(f"expected one pair count per seed, got {len(n_pairs)}")

    def mean_over_draw(draw: Draw) -> float:
        return float(np.mean([per_seed[s](idx) for s, idx in draw]))

    values = two_level_bootstrap(n_pairs, mean_over_draw, n_resamples=n_resamples, seed=seed)
    return percentile_interval(values, level)


def cluster_pearson_interval(
    x: np.ndarray,
    y: np.ndarray,
    clusters: Sequence[str],
    *,
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval of Pearson r over points clustered in ``clusters`` (experiment 3: students
    in methods): methods drawn with replacement, then students within each drawn method.
    NaN for fewer than two clusters (nothing to resample at the outer level)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    labels = np.asarray(clusters)
    members = [np.flatnonzero(labels == c) for c in dict.fromkeys(labels.tolist())]
    if len(members) < 2:
        return float("nan"), float("nan")

    def r_of(draw: Draw) -> float:
        rows = np.concatenate([members[j][idx] for j, idx in draw])
        return pearson_or_nan(x[rows], y[rows])

    values = two_level_bootstrap(
        [m.size for m in members], r_of, n_resamples=n_resamples, seed=seed
    )
    return percentile_interval(values, level)


def pearson_or_nan(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r in float64, NaN where either side is constant (a resample may draw one
    value many times); unlike :func:`mechscope.stats.pearson` it does not warn."""
    a = np.asarray(a, np.float64) - np.mean(a)
    b = np.asarray(b, np.float64) - np.mean(b)
    den = np.sqrt(np.dot(a, a) * np.dot(b, b))
    return float(np.dot(a, b) / den) if den > 0 else float("nan")
