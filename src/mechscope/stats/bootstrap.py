"""Bootstrap confidence intervals for curves (one value per layer, bin, head ...).

Every curve mechscope draws carries a confidence interval, and the resampling unit is the
*sample* (prompt, problem, trace): tokens of one sample are not independent, so resampling
them would give intervals that are far too narrow. All functions here take ``values`` of
shape ``[n_samples, *point_shape]`` (usually ``[n_samples, n_points]``, one per-sample
summary per layer) and resample along axis 0.

All intervals come from :func:`scipy.stats.bootstrap`, vectorised over points and over
resamples, so a 32-layer curve costs one call, not 32. Missing values (NaN, e.g. a progress
bin that a short sample never reached) are skipped with ``nanmean``: each replicate's
statistic is the mean over the samples that have a value at that point. A point whose
replicate happens to contain no finite value gets a NaN replicate, and then NaN bounds
(reported with one RuntimeWarning that counts such points).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats._checks import (
    as_float_array,
    as_labels,
    check_positive_int,
    check_probability,
)

Method = Literal["percentile", "BCa"]
Seed = int | np.random.Generator

# Resampled data are materialised as [*point_shape, batch, n_samples] float64 arrays (plus
# nanmean's temporaries); resamples are processed in batches that keep this under ~256 MiB.
_BATCH_BYTES = 256 * 2**20
_TEMPORARIES = 4


@dataclass(frozen=True)
class CurveCI:
    """A mean curve with its bootstrap confidence band.

    ``mean``, ``low`` and ``high`` share the point shape of the input (``[n_points]`` for a
    2-d input). ``n`` is the number of samples that were resampled (for a group difference,
    both groups together). ``confidence`` and ``method`` travel with the numbers so that
    a figure or table can say what its band means.
    """

    mean: np.ndarray  # [n_points]
    low: np.ndarray  # [n_points]
    high: np.ndarray  # [n_points]
    n: int
    confidence: float = 0.95
    method: str = "percentile"


def curve_ci(
    values: np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: Seed = 0,
    method: Method = "percentile",
    batch: int | None = None,
) -> CurveCI:
    """Bootstrap CI of the across-sample mean at every point of a curve.

    ``values`` is ``[n_samples, n_points]`` (any trailing point shape works). The interval
    is percentile by default: it is transparent and does not break on degenerate points;
    ``method="BCa"`` corrects bias and skew at the cost of a jackknife pass. ``seed`` is an
    int or a :class:`numpy.random.Generator`, so the same seed gives the same interval as
    calling :func:`scipy.stats.bootstrap` directly. ``batch`` (resamples per vectorised
    call) only bounds memory; it does not change the result.
    """
    x = as_float_array(values, field="values")  # [n_samples, *points]
    _need_two(x.shape[0], field="values")
    method = _check_options(confidence, n_resamples, method)
    statistic = _nanmean if np.isnan(x).any() else np.mean  # same value; mean is faster
    low, high = _scipy_interval(
        (x,), statistic, confidence, n_resamples, _rng(seed), method, batch, x.size
    )
    return CurveCI(_nanmean(x, axis=0), low, high, x.shape[0], confidence, method)


def cell_ci(values: np.ndarray, *, n_resamples: int = 2000, seed: Seed = 0) -> CurveCI:
    """:func:`curve_ci` over ``values`` ``[n_samples, *cells]`` (a heatmap's cells), except
    that one sample gives NaN bounds instead of an error: a figure then draws no interval."""
    x = as_float_array(values, field="values")  # [n_samples, *cells]
    if x.shape[0] < 2:
        nan = np.full(x.shape[1:], np.nan)
        return CurveCI(_nanmean(x, axis=0), nan, nan.copy(), x.shape[0])
    return curve_ci(x, n_resamples=n_resamples, seed=seed)


def mean_ci(
    values: np.ndarray, *, confidence: float = 0.95, n_resamples: int = 2000, seed: Seed = 0
) -> tuple[float, float, float, int]:
    """``(mean, low, high, n)`` of the finite ``values``: their mean and its percentile
    bootstrap CI (:func:`curve_ci` of one point). The bounds are NaN when there is nothing to
    resample: fewer than two values, or all equal; a report then says "no interval"."""
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return np.nan, np.nan, np.nan, 0
    if x.size < 2 or np.all(x == x[0]):
        return float(x.mean()), np.nan, np.nan, int(x.size)
    ci = curve_ci(x[:, None], confidence=confidence, n_resamples=n_resamples, seed=seed)
    return float(x.mean()), float(ci.low[0]), float(ci.high[0]), int(x.size)


def stratified_curve_ci(
    values: np.ndarray,
    strata: Sequence[str],
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: Seed = 0,
    method: Method = "percentile",
    batch: int | None = None,
) -> CurveCI:
    """Bootstrap CI of the overall mean, resampling within each stratum.

    When samples fall into known groups (e.g. the four pass/fail quadrants of two prompt
    conditions), a plain bootstrap lets the group proportions drift between replicates and
    adds that drift to the interval. Stratifying keeps every stratum's size fixed, so the
    band reflects only the variability *within* groups. The statistic is still the mean
    over all samples (NaN-skipping), not a mean of group means.

    This is :func:`scipy.stats.bootstrap` with one data sample per stratum
    (``paired=False``): scipy resamples each sample independently with replacement at its
    own size, which is exactly stratified resampling. A stratum with a single sample cannot
    vary under resampling, so it enters every replicate as a fixed contribution (scipy
    refuses one-observation samples). With several strata, scipy draws each batch stratum
    by stratum, so an explicit ``batch`` changes which (equally valid) replicates are drawn;
    the default depends only on the data's shape, so reruns are identical.
    """
    x = as_float_array(values, field="values")  # [n_samples, *points]
    labels = as_labels(strata, x.shape[0], field="strata")
    method = _check_options(confidence, n_resamples, method)
    parts = [x[labels == s] for s in np.unique(labels)]
    varying = tuple(p for p in parts if p.shape[0] >= 2)
    if not varying:
        raise InputError("expected at least one stratum with 2 or more samples", field="strata")
    fixed = [p for p in parts if p.shape[0] == 1]
    fixed_sum = np.nansum(np.concatenate(fixed), axis=0) if fixed else 0.0  # [*points]
    fixed_count = np.sum(~np.isnan(np.concatenate(fixed)), axis=0) if fixed else 0
    point_ndim = x.ndim - 1

    def pooled_mean(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        total = sum(np.nansum(s, axis=axis) for s in samples)  # [*points, (batch)]
        count = sum(np.sum(~np.isnan(s), axis=axis) for s in samples)
        extra = (1,) * (np.ndim(total) - point_ndim)  # broadcast fixed parts over resamples
        total = total + np.reshape(fixed_sum, np.shape(fixed_sum) + extra)
        count = count + np.reshape(fixed_count, np.shape(fixed_count) + extra)
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count

    low, high = _scipy_interval(
        varying, pooled_mean, confidence, n_resamples, _rng(seed), method, batch, x.size
    )
    return CurveCI(_nanmean(x, axis=0), low, high, x.shape[0], confidence, method)


def group_curve_cis(
    values: np.ndarray,
    groups: Sequence[str],
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: Seed = 0,
    method: Method = "percentile",
) -> dict[str, CurveCI]:
    """One :func:`curve_ci` per group, resampling only inside the group.

    Groups are processed in sorted order from one generator built from ``seed``, so the
    result is reproducible and the groups do not share resampling indices.
    """
    x = as_float_array(values, field="values")
    labels = as_labels(groups, x.shape[0], field="groups")
    rng = _rng(seed)
    out: dict[str, CurveCI] = {}
    for g in np.unique(labels):
        members = x[labels == g]
        _need_two(members.shape[0], field="groups", group=str(g))
        out[str(g)] = curve_ci(
            members, confidence=confidence, n_resamples=n_resamples, seed=rng, method=method
        )
    return out


def group_difference_ci(
    values: np.ndarray,
    groups: Sequence[str],
    a: str,
    b: str,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: Seed = 0,
    method: Method = "percentile",
    batch: int | None = None,
) -> CurveCI:
    """Bootstrap CI of ``mean(group a) - mean(group b)`` at every point.

    Both groups are resampled (each within itself, at its own size) in the same replicate
    and the difference is taken per replicate, which is what makes the band a band for the
    *difference*; subtracting two separate bands would be wrong. Uses
    :func:`scipy.stats.bootstrap` with two samples and ``paired=False``. ``n`` of the
    result counts both groups.
    """
    x = as_float_array(values, field="values")
    labels = as_labels(groups, x.shape[0], field="groups")
    method = _check_options(confidence, n_resamples, method)
    xa, xb = x[labels == str(a)], x[labels == str(b)]
    _need_two(xa.shape[0], field="groups", group=str(a))
    _need_two(xb.shape[0], field="groups", group=str(b))

    def mean_difference(sa: np.ndarray, sb: np.ndarray, axis: int = -1) -> np.ndarray:
        return _nanmean(sa, axis=axis) - _nanmean(sb, axis=axis)

    low, high = _scipy_interval(
        (xa, xb), mean_difference, confidence, n_resamples, _rng(seed), method, batch, x.size
    )
    mean = mean_difference(xa, xb, axis=0)
    return CurveCI(mean, low, high, xa.shape[0] + xb.shape[0], confidence, method)


def _nanmean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """NaN-skipping mean; an all-NaN slice is an expected NaN, not a warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def _scipy_interval(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    confidence: float,
    n_resamples: int,
    rng: np.random.Generator,
    method: str,
    batch: int | None,
    n_values: int,
) -> tuple[np.ndarray, np.ndarray]:
    if batch is None:
        batch = max(1, min(n_resamples, _BATCH_BYTES // (8 * _TEMPORARIES * max(n_values, 1))))
    with warnings.catch_warnings():
        # scipy words every NaN bound as a BCa failure, also for percentile intervals;
        # it is replaced by the warning below, which says what happened.
        warnings.filterwarnings("ignore", "The BCa confidence interval cannot be calculated")
        res = stats.bootstrap(
            data,
            statistic,
            n_resamples=n_resamples,
            batch=batch,
            vectorized=True,
            paired=False,
            axis=0,
            confidence_level=confidence,
            method=method,
            rng=rng,
        )
    low = np.asarray(res.confidence_interval.low, dtype=np.float64)
    high = np.asarray(res.confidence_interval.high, dtype=np.float64)
    n_nan = int(np.sum(np.isnan(low) | np.isnan(high)))
    if n_nan:
        warnings.warn(
            f"confidence bounds are NaN at {n_nan} of {low.size} points: some resamples had "
            "no finite value there (too few samples with data), or BCa met a degenerate "
            "(e.g. constant) bootstrap distribution",
            RuntimeWarning,
            stacklevel=3,
        )
    return low, high


def _check_options(confidence: float, n_resamples: int, method: str) -> str:
    check_probability(confidence, field="confidence")
    check_positive_int(n_resamples, field="n_resamples")
    canonical = {"percentile": "percentile", "bca": "BCa"}.get(str(method).lower())
    if canonical is None:
        raise InputError(f"expected 'percentile' or 'BCa', got {method!r}", field="method")
    return canonical


def _need_two(n: int, *, field: str, group: str | None = None) -> None:
    """A bootstrap needs at least two samples to resample from."""
    where = f"group {group!r}: " if group is not None else ""
    if n < 2:
        raise InputError(f"{where}expected at least 2 samples to bootstrap, got {n}", field=field)


def _rng(seed: Seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
