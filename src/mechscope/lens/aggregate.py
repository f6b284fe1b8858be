"""From per-sample paired results to curves with confidence intervals and aligned heatmaps.

Per sample, a layer's value is the mean over its semantic tokens; curves average those
over samples, with bootstrap CIs that resample samples (stratified by group when groups
exist). Groups get their own curves, and the difference of two named groups gets a CI
where both groups are resampled in the same replicate. Samples of different lengths are
aligned three ways for heatmaps: progress bins, first K semantic tokens, and a window
around an anchor (first ``return`` by default).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mechscope.lens.result import METRICS, SampleDiff
from mechscope.lens.tokens import TOKEN_CLASSES, anchor_pattern, anchor_token
from mechscope.runs.tensors import array
from mechscope.stats import (
    anchor_align,
    curve_ci,
    first_k,
    group_curve_cis,
    group_difference_ci,
    pearson,
    progress_bins,
    stratified_curve_ci,
)


@dataclass(frozen=True)
class AggregateOptions:
    n_bins: int = 50
    first_k: int = 64
    anchor: str = "return"
    anchor_before: int = 16
    anchor_after: int = 48
    group_diff: tuple[str, str] | None = None
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0


def _finite(samples: Sequence[SampleDiff]) -> None:
    for s in samples:
        s.require_finite(semantic_only=True)  # the tokens every aggregate reads


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def per_sample_layer_means(samples: Sequence[SampleDiff], metric: str, mask_fn=None) -> np.ndarray:
    """``[n_samples, layers]``: each sample's mean over its semantic tokens (or ``mask_fn``)."""
    rows = []
    for s in samples:
        keep = array(s.semantic) if mask_fn is None else mask_fn(s)
        vals = array(s.metric(metric))[:, keep]  # [L, kept]
        rows.append(_nanmean(vals, axis=1) if vals.shape[1] else np.full(s.n_layers, np.nan))
    return np.stack(rows)


def ci_rows(
    values: np.ndarray,
    opts: AggregateOptions,
    *,
    strata: Sequence[str] | None = None,
    **labels: object,
) -> pd.DataFrame:
    """Mean curve with bootstrap CI over axis 0 of ``values [n, points]`` as rows.

    With ``strata``, resampling is stratified; when no stratum has two samples (a few
    samples, each in its own group) it cannot be, and all samples are resampled together.
    """
    n = values.shape[0]
    kw = dict(confidence=opts.confidence, n_resamples=opts.n_resamples, seed=opts.seed)
    sizes = [list(strata).count(g) for g in set(strata)] if strata is not None else [n]
    if n >= 2 and len(sizes) > 1 and max(sizes) >= 2:
        ci = stratified_curve_ci(values, strata, **kw)
        mean, low, high = ci.mean, ci.low, ci.high
    elif n >= 2:
        ci = curve_ci(values, **kw)
        mean, low, high = ci.mean, ci.low, ci.high
    else:  # one sample: a mean, no interval
        mean, low, high = (
            _nanmean(values, 0),
            np.full(values.shape[1], np.nan),
            np.full(values.shape[1], np.nan),
        )
    return pd.DataFrame(
        {
            **labels,
            "layer": np.arange(values.shape[1]),
            "mean": mean,
            "low": low,
            "high": high,
            "n": n,
        }
    )


def _group_rows(
    values: np.ndarray, groups: list[str | None], opts: AggregateOptions, **labels: object
) -> list[pd.DataFrame]:
    """Overall curve (stratified by group), one curve per group, and the named difference."""
    named = [g if g is not None else "" for g in groups]
    has_groups = any(g is not None for g in groups)
    frames = [
        ci_rows(
            values, opts, strata=named if has_groups else None, **labels, group="all", kind="curve"
        )
    ]
    if not has_groups:
        return frames
    kw = dict(confidence=opts.confidence, n_resamples=opts.n_resamples, seed=opts.seed)
    big = [g for g in sorted(set(named)) if named.count(g) >= 2]
    sel = np.isin(named, big)
    if big:
        for g, ci in group_curve_cis(values[sel], list(np.asarray(named)[sel]), **kw).items():
            frames.append(
                pd.DataFrame(
                    {
                        **labels,
                        "group": g,
                        "kind": "curve",
                        "layer": np.arange(values.shape[1]),
                        "mean": ci.mean,
                        "low": ci.low,
                        "high": ci.high,
                        "n": ci.n,
                    }
                )
            )
    if opts.group_diff is not None and set(opts.group_diff) <= set(big):
        ga, gb = opts.group_diff
        ci = group_difference_ci(values, named, ga, gb, **kw)
        frames.append(
            pd.DataFrame(
                {
                    **labels,
                    "group": f"{ga} - {gb}",
                    "kind": "difference",
                    "layer": np.arange(values.shape[1]),
                    "mean": ci.mean,
                    "low": ci.low,
                    "high": ci.high,
                    "n": ci.n,
                }
            )
        )
    return frames


def metric_curves(samples: Sequence[SampleDiff], opts: AggregateOptions) -> pd.DataFrame:
    """Per-layer curves of every metric (semantic tokens), overall, per group, difference."""
    _finite(samples)
    groups = [s.group for s in samples]
    frames = []
    for metric in METRICS:
        frames += _group_rows(per_sample_layer_means(samples, metric), groups, opts, metric=metric)
    return pd.concat(frames, ignore_index=True)


def class_curves(
    samples: Sequence[SampleDiff], opts: AggregateOptions, metrics: Sequence[str] = ("dnll", "js")
) -> pd.DataFrame:
    """Per-layer curves restricted to one code token class at a time."""
    _finite(samples)
    frames = []
    for cls in TOKEN_CLASSES:

        def keep(s: SampleDiff, cls: str = cls) -> np.ndarray:
            return array(s.semantic) & (np.asarray(s.classes) == cls)

        if not any(keep(s).any() for s in samples):
            continue
        for metric in metrics:
            vals = per_sample_layer_means(samples, metric, keep)
            ok = ~np.all(np.isnan(vals), axis=1)
            frames.append(ci_rows(vals[ok], opts, metric=metric, token_class=cls))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def aligned_heatmaps(
    samples: Sequence[SampleDiff], opts: AggregateOptions, metrics: Sequence[str] = METRICS
) -> pd.DataFrame:
    """Layer × column means over samples for progress bins, first K and anchor windows."""
    _finite(samples)
    pattern = anchor_pattern(opts.anchor)
    frames = []
    for metric in metrics:
        per: dict[str, list[np.ndarray]] = {"progress": [], "first_k": [], "anchor": []}
        for s in samples:
            semantic = array(s.semantic)
            vals = array(s.metric(metric))[:, semantic].astype(np.float64)  # [L, K]
            if vals.shape[1] == 0:
                continue
            per["progress"].append(progress_bins(vals, opts.n_bins))
            per["first_k"].append(first_k(vals, opts.first_k))
            spans = [tuple(o) for o in s.offsets.tolist()]
            at = anchor_token(s.continuation, spans, semantic, pattern)
            if at is not None:
                per["anchor"].append(anchor_align(vals, at, opts.anchor_before, opts.anchor_after))
        for kind, arrays in per.items():
            if not arrays:
                continue
            stack = np.stack(arrays)  # [n, L, cols]
            mean = _nanmean(stack, 0)
            count = np.sum(~np.isnan(stack), axis=0)
            n_l, n_c = mean.shape
            layer, col = np.meshgrid(np.arange(n_l), np.arange(n_c), indexing="ij")
            offset = -opts.anchor_before if kind == "anchor" else 0
            frames.append(
                pd.DataFrame(
                    {
                        "alignment": kind,
                        "metric": metric,
                        "layer": layer.ravel(),
                        "column": col.ravel() + offset,
                        "mean": mean.ravel(),
                        "n": count.ravel(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def attention_curves(samples: Sequence[SampleDiff], opts: AggregateOptions) -> pd.DataFrame:
    """Per-layer attention mass (mean over heads and semantic tokens) per condition and
    segment, overall and per group."""
    _finite(samples)
    frames = []
    with_att = [s for s in samples if s.attention]
    if not with_att:
        return pd.DataFrame()
    for cond in with_att[0].attention:
        names = sorted({seg for s in with_att for seg in s.segments[cond]})
        for seg in names:
            rows, groups = [], []
            for s in with_att:
                if seg not in s.segments[cond]:
                    continue
                mass = array(s.attention[cond])[..., s.segments[cond].index(seg)]  # [L, H, T]
                rows.append(mass.mean(axis=1)[:, array(s.semantic)].mean(axis=1))  # [L]
                groups.append(s.group)
            frames += _group_rows(np.stack(rows), groups, opts, condition=cond, segment=seg)
    return pd.concat(frames, ignore_index=True)


def attention_correlations(samples: Sequence[SampleDiff]) -> pd.DataFrame:
    """Per sample: Pearson r between head-mean segment mass and ΔNLL over layer × token."""
    _finite(samples)
    rows = []
    for s in samples:
        semantic = array(s.semantic)
        dnll = array(s.metric("dnll"))[:, semantic].ravel()
        for cond, mass in s.attention.items():
            avg = array(mass).mean(axis=1)  # [L, T, S]
            for k, seg in enumerate(s.segments[cond]):
                x = avg[..., k][:, semantic].ravel()
                r = pearson(x, dnll) if x.size >= 3 else float("nan")
                rows.append(
                    {
                        "sample": s.sample_id,
                        "group": s.group,
                        "condition": cond,
                        "segment": seg,
                        "r": r,
                        "n_cells": int(x.size),
                    }
                )
    return pd.DataFrame(rows)


def correlation_summary(corr: pd.DataFrame, opts: AggregateOptions) -> pd.DataFrame:
    """Mean per-sample correlation per condition and segment, with a bootstrap CI."""
    if corr.empty:
        return pd.DataFrame()
    frames = []
    for (cond, seg), part in corr.groupby(["condition", "segment"], sort=True):
        vals = part["r"].to_numpy(dtype=np.float64)[:, None]
        vals = vals[~np.isnan(vals[:, 0])]
        if vals.size == 0:
            continue
        frames.append(ci_rows(vals, opts, condition=cond, segment=seg).drop(columns="layer"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
