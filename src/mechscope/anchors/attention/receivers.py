"""Receiver heads: attention heads that single out a few sentences of a trace for all later
sentences to look back at.

Per trace and head, with ``A`` the block-mean sentence matrix
(:mod:`mechscope.anchors.attention.sentence_attention`, row = attending sentence ``i``, column =
attended sentence ``j``):

- vertical score ``v[j] = nanmean(A[i, j] for i ≥ j + proximity)``: the attention that
  sentence ``j`` receives from sentences at least ``proximity`` (4) later. Columns with no
  such row are NaN (the last ``proximity`` sentences). With ``control_depth`` each row is
  first rank-normalised over its kept entries (``rank / count``), the variant the reference
  code offers against the fact that late rows spread attention over more sentences;
- kurtosis of ``v`` over sentences (scipy, Fisher, ``bias=True``, NaNs omitted;
  :func:`mechscope.stats.kurtosis_across`): high when a head's attention lands on a few
  sentences;
- across traces the per-trace kurtosis is averaged (``nanmean``); layers in
  ``exclude_layers`` (layer 0) are dropped; the ``top_k`` (16) heads with the highest mean
  kurtosis are the receiver heads;
- receiver score of sentence ``j`` = the mean of ``v[j]`` over the receiver heads;
- split-half reliability over traces of the per-head kurtosis profile
  (:func:`mechscope.stats.split_half_reliability`): how stable the choice of heads is.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from mechscope.anchors.attention.sentence_attention import sentence_attention
from mechscope.anchors.attention.trace_tokens import TraceTokens
from mechscope.anchors.config import ReceiverOptions
from mechscope.anchors.result import ReceiverResult
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.stats import kurtosis_across, split_half_reliability


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    count = np.sum(~np.isnan(x), axis=axis)
    total = np.nansum(x, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def vertical_scores(
    matrix: np.ndarray, proximity: int = 4, *, control_depth: bool = False
) -> np.ndarray:
    """Vertical score of every sentence: ``[..., n, n]`` → ``[..., n]`` float64."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise InputError(f"a [..., n, n] matrix, got shape {m.shape}", field="matrix")
    n = m.shape[-1]
    rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
    m = np.where(rows - cols >= proximity, m, np.nan)  # [..., n, n]
    if control_depth:
        kept = np.sum(~np.isnan(m), axis=-1, keepdims=True)  # [..., n, 1]
        ranks = stats.rankdata(m, axis=-1, nan_policy="omit")
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.where(kept > 0, ranks / np.maximum(kept, 1), np.nan)
    return _nanmean(m, axis=-2)  # mean over attending rows → [..., n]


def head_kurtosis(vertical: np.ndarray) -> np.ndarray:
    """Kurtosis of each head's vertical scores over sentences: ``[..., n]`` → ``[...]``."""
    return kurtosis_across(vertical, axis=-1)


@dataclass
class TraceReceivers:
    """The per-head scores of one trace."""

    trace_id: str
    vertical: np.ndarray  # [layers, heads, n_sent]
    kurtosis: np.ndarray  # [layers, heads]


def trace_receivers(
    eng: Engine, tokens: TraceTokens, options: ReceiverOptions | None = None
) -> TraceReceivers:
    """One forward over the trace; sentence matrices are reduced to scores on the fly."""
    opts = options or ReceiverOptions()
    if tokens.n_sentences == 0:
        raise InputError("a trace with at least one sentence", sample=tokens.trace_id)
    mats = sentence_attention(eng, tokens)  # [L, H, n, n]
    vert = vertical_scores(mats, opts.proximity, control_depth=opts.control_depth)
    return TraceReceivers(tokens.trace_id, vert, head_kurtosis(vert))


def select_heads(
    mean_kurtosis: np.ndarray, top_k: int, exclude_layers: Sequence[int] = (0,)
) -> list[tuple[int, int]]:
    """The ``top_k`` ``(layer, head)`` of highest kurtosis, highest first (NaN never chosen)."""
    k = np.array(mean_kurtosis, dtype=np.float64)  # [L, H]
    for layer in exclude_layers:
        if 0 <= layer < k.shape[0]:
            k[layer] = np.nan
    flat = k.ravel()
    valid = np.flatnonzero(~np.isnan(flat))
    order = valid[np.argsort(-flat[valid], kind="stable")][:top_k]
    return [(int(i // k.shape[1]), int(i % k.shape[1])) for i in order]


def receiver_scores(vertical: np.ndarray, heads: Sequence[tuple[int, int]]) -> np.ndarray:
    """Mean vertical score over ``heads``: ``[L, H, n]`` → ``[n]`` (NaN where all are NaN)."""
    if not heads:
        return np.full(vertical.shape[-1], np.nan)
    picked = np.stack([vertical[layer, head] for layer, head in heads])  # [k, n]
    return _nanmean(picked, axis=0)


def analyze_receivers(
    traces: Sequence[TraceReceivers], options: ReceiverOptions | None = None
) -> ReceiverResult:
    """Average kurtosis over traces, pick the receiver heads, score every trace's sentences."""
    opts = options or ReceiverOptions()
    if not traces:
        raise InputError("at least one trace", field="traces")
    kurt = np.stack([t.kurtosis for t in traces]).astype(np.float64)  # [n_traces, L, H]
    for layer in opts.exclude_layers:
        if 0 <= layer < kurt.shape[1]:
            kurt[:, layer] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN heads stay NaN
        mean = _nanmean(kurt, axis=0)  # [L, H]
    heads = select_heads(mean, opts.top_k, opts.exclude_layers)
    scores = {t.trace_id: receiver_scores(t.vertical, heads) for t in traces}
    reliability = None
    eligible = kurt.reshape(kurt.shape[0], -1)  # [n_traces, L*H]
    eligible = eligible[:, ~np.all(np.isnan(eligible), axis=0)]
    if eligible.shape[0] >= 2 and eligible.shape[1] >= 3:
        reliability = split_half_reliability(eligible, n_splits=opts.n_splits, seed=opts.seed)
    return ReceiverResult(
        trace_ids=[t.trace_id for t in traces],
        kurtosis=kurt,
        mean_kurtosis=mean,
        heads=heads,
        scores=scores,
        reliability=reliability,
        options=opts,
    )
