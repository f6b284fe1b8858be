"""Align per-token sequences of different lengths so that samples can be averaged.

A teacher-forced continuation gives one value per (layer, token), but every sample has its
own number of tokens, so ``[n_layers, n_tokens]`` arrays cannot be stacked directly. Three
alignments answer three questions:

- :func:`progress_bins` — *when* in the continuation (relative progress 0..1) does an
  effect happen? Token ``k`` of ``K`` goes to bin ``floor(k * n_bins / K)``.
- :func:`first_k` — what happens in the first ``k`` tokens (the rest is cut off)?
- :func:`anchor_align` — what happens around a structural anchor (first ``return``, a
  given sentence), in tokens relative to it?

Each returns a fixed-width array with NaN where a sample has no value, and
:func:`nanmean_stack` stacks them into ``[n_samples, ...]`` for NaN-aware statistics such
as :func:`mechscope.stats.curve_ci`. Tokens are always the last axis; leading axes
(layers, heads ...) are carried through.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechscope.errors import InputError
from mechscope.stats._checks import as_float_array, check_positive_int


def progress_bin_index(n_tokens: int, n_bins: int = 50) -> np.ndarray:
    """Bin of every token: ``floor(k * n_bins / n_tokens)`` for ``k = 0 .. n_tokens-1``.

    Integer arithmetic, so bin edges are exact (no float rounding at boundaries). Bins are
    contiguous and non-decreasing; the first token is in bin 0, the last in bin
    ``n_bins - 1`` when ``n_tokens >= n_bins``.
    """
    check_positive_int(n_bins, field="n_bins")
    check_positive_int(n_tokens, field="n_tokens", minimum=0)
    if n_tokens == 0:
        return np.zeros(0, dtype=np.int64)
    return np.arange(n_tokens, dtype=np.int64) * n_bins // n_tokens  # [n_tokens]


def progress_bin_counts(n_tokens: int, n_bins: int = 50) -> np.ndarray:
    """Number of tokens in each progress bin, ``[n_bins]`` (sums to ``n_tokens``).

    When ``n_tokens < n_bins`` some bins are empty (count 0) and :func:`progress_bins`
    reports NaN there rather than inventing a value by interpolation.
    """
    return np.bincount(progress_bin_index(n_tokens, n_bins), minlength=n_bins)


def progress_bins(values: np.ndarray, n_bins: int = 50) -> np.ndarray:
    """Mean of ``values [n_layers, n_tokens]`` in each progress bin -> ``[n_layers, n_bins]``.

    NaN tokens (e.g. positions masked by ``ignore_index``) are skipped, so a bin's value is
    the mean of its non-NaN tokens; a bin with no such token (empty, or all NaN) is NaN.
    Each token lands in exactly one bin, so ``Σ_bins mean × count`` equals the sum over
    tokens: no token is counted twice or dropped.
    """
    x = as_float_array(values, field="values")  # [..., n_tokens]
    n_tokens = x.shape[-1]
    index = progress_bin_index(n_tokens, n_bins)  # [n_tokens]
    out = np.full((*x.shape[:-1], n_bins), np.nan)
    if n_tokens == 0:
        return out
    missing = np.isnan(x)
    occupied = np.unique(index)  # bins with at least one token, ascending
    starts = np.searchsorted(index, occupied)  # first token of each occupied bin
    sums = np.add.reduceat(np.where(missing, 0.0, x), starts, axis=-1)  # [..., n_occupied]
    counts = np.add.reduceat((~missing).astype(np.int64), starts, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[..., occupied] = np.where(counts > 0, sums / counts, np.nan)
    return out


def first_k(values: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` tokens of ``values [n_layers, n_tokens]`` -> ``[n_layers, k]``.

    Longer sequences are truncated, shorter ones padded with NaN (not 0, which would read as
    a real measurement and pull means toward zero).
    """
    x = as_float_array(values, field="values")  # [..., n_tokens]
    check_positive_int(k, field="k")
    out = np.full((*x.shape[:-1], k), np.nan)
    keep = min(k, x.shape[-1])
    out[..., :keep] = x[..., :keep]
    return out


def anchor_align(values: np.ndarray, anchor_index: int, before: int, after: int) -> np.ndarray:
    """Window of tokens around an anchor -> ``[n_layers, before + after]``.

    Column ``j`` holds token ``anchor_index - before + j``: columns ``0 .. before-1`` are
    the tokens preceding the anchor, column ``before`` is the anchor itself, and the last
    ``after - 1`` columns follow it. Positions outside the sequence are NaN, so samples
    whose anchor sits near an edge still align on the anchor column.
    """
    x = as_float_array(values, field="values")  # [..., n_tokens]
    n_tokens = x.shape[-1]
    check_positive_int(before, field="before", minimum=0)
    check_positive_int(after, field="after", minimum=0)
    if before + after == 0:
        raise InputError("expected before + after >= 1", field="after")
    if isinstance(anchor_index, bool) or not 0 <= int(anchor_index) < n_tokens:
        raise InputError(
            f"expected an anchor token index in [0, {n_tokens}), got {anchor_index}",
            field="anchor_index",
        )
    start = int(anchor_index) - before
    lo, hi = max(start, 0), min(start + before + after, n_tokens)
    out = np.full((*x.shape[:-1], before + after), np.nan)
    out[..., lo - start : hi - start] = x[..., lo:hi]
    return out


def nanmean_stack(arrays: Sequence[np.ndarray], sample_ids: Sequence[str] | None = None):
    """Stack aligned per-sample arrays ``[n_layers, n_bins]`` -> ``[n_samples, n_layers, n_bins]``.

    The result keeps its NaN padding and is meant for NaN-aware reductions over axis 0
    (``np.nanmean``, :func:`mechscope.stats.curve_ci`), which average each bin over the
    samples that reached it. A shape mismatch names the offending sample (by
    ``sample_ids`` when given, else by position).
    """
    if len(arrays) == 0:
        raise InputError("expected at least one array to stack", field="arrays")
    ids = list(sample_ids) if sample_ids is not None else [str(i) for i in range(len(arrays))]
    if len(ids) != len(arrays):
        raise InputError(f"expected {len(arrays)} sample ids, got {len(ids)}", field="sample_ids")
    parts = [as_float_array(a, field="arrays", min_ndim=0) for a in arrays]
    shape = parts[0].shape
    for sid, part in zip(ids, parts, strict=True):
        if part.shape != shape:
            raise InputError(
                f"expected shape {shape} like the first sample, got {part.shape}",
                sample=str(sid),
                field="arrays",
            )
    return np.stack(parts)  # [n_samples, n_layers, n_bins]
