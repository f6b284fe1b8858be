"""Receiver heads: streaming sentence matrices, vertical scores, kurtosis, head choice.

Attention read off a model is compared up to the rounding of the probabilities (their
scores' scale, the pass's depth: tests/tolerance.py); float64 formulas on given arrays up to
their own rounding (the length of their sums, the values' scale).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from whitebox_helpers import eager_copy, tiny_setup

from mechscope.anchors.attention.receivers import (
    TraceReceivers,
    analyze_receivers,
    head_kurtosis,
    select_heads,
    trace_receivers,
    vertical_scores,
)
from mechscope.anchors.attention.sentence_attention import sentence_attention
from mechscope.anchors.attention.trace_tokens import TraceTokens
from mechscope.anchors.config import ReceiverOptions
from mechscope.engine import Read, Site
from mechscope.errors import InputError
from mechscope.stats import split_half_reliability
from tolerance import assert_fp64_close, assert_rounding_close, depth_of, scale_of, score_scale


@pytest.fixture(scope="module")
def tiny():
    return tiny_setup()


def _loop_vertical(m: np.ndarray, proximity: int) -> np.ndarray:
    n = m.shape[0]
    out = np.full(n, np.nan)
    for j in range(n):
        vals = [m[i, j] for i in range(j + proximity, n) if not math.isnan(m[i, j])]
        if vals:
            out[j] = sum(vals) / len(vals)
    return out


def test_trace_has_sentences(tiny):
    _, _, trace, tokens = tiny
    assert tokens.n_sentences == trace.n_chunks >= 8
    assert all(end > start for start, end in tokens.ranges)


def test_streaming_matrices_equal_stored_attention(tiny):
    lm, eng, _, tokens = tiny
    with torch.no_grad():
        att = eager_copy(lm)(input_ids=tokens.input_ids, output_attentions=True).attentions
    got = sentence_attention(eng, tokens)  # [L, H, n, n]
    n = tokens.n_sentences
    ref = np.zeros((lm.n_layers, lm.n_heads, n, n))
    for layer in range(lm.n_layers):
        probs = att[layer][0].double().numpy()  # [H, T, T]
        for h in range(lm.n_heads):
            for i, (si, ei) in enumerate(tokens.ranges):
                for j, (sj, ej) in enumerate(tokens.ranges):
                    ref[layer, h, i, j] = probs[h, si:ei, sj:ej].mean()
    sites = [Site("attn_scores", layer) for layer in range(lm.n_layers)]
    scores = eng.run(tokens.input_ids, [Read(s) for s in sites], logits=False)
    scale, depth = max(score_scale(scores[s]) for s in sites), depth_of(lm)
    assert_rounding_close(got, ref, depth=depth, scale=scale, msg="sentence attention")
    # receiver scores from the streamed path equal those from the stored attention
    opts = ReceiverOptions(proximity=2, top_k=3)
    streamed = analyze_receivers([trace_receivers(eng, tokens, opts)], opts)
    stored = analyze_receivers(
        [TraceReceivers("t0", vertical_scores(ref, 2), head_kurtosis(vertical_scores(ref, 2)))],
        opts,
    )
    assert streamed.heads == stored.heads  # means of those blocks: the same rounding
    got, want = streamed.scores["t0"], stored.scores["t0"]
    assert_rounding_close(got, want, depth=depth, scale=scale, msg="receiver scores")


@pytest.mark.parametrize("proximity", [0, 1, 4])
def test_vertical_scores_plain_loop(proximity):
    rng = np.random.default_rng(proximity)
    m = rng.random((12, 12))
    m[7, 2] = np.nan  # a missing block is skipped, not averaged as 0
    got = vertical_scores(m, proximity)
    # Means of up to 12 values in [0, 1): float64 sums of 12 terms.
    assert_fp64_close(got, _loop_vertical(m, proximity), terms=12, scale=1.0, msg="loop")
    assert np.isnan(got[-1]) == (proximity > 0)
    batched = vertical_scores(np.stack([m, 2 * m]), proximity)  # [2, n]
    assert_fp64_close(batched[1], 2 * got, terms=12, scale=2.0, msg="batched")


def test_vertical_scores_control_depth_plain_loop():
    rng = np.random.default_rng(3)
    m, proximity = rng.random((9, 9)), 2
    ranked = np.full_like(m, np.nan)
    for i in range(9):
        cols = [j for j in range(9) if i - j >= proximity]
        if cols:
            ranked[i, cols] = stats.rankdata(m[i, cols]) / len(cols)
    got = vertical_scores(m, proximity, control_depth=True)
    assert_fp64_close(got, _loop_vertical(ranked, proximity), terms=9, scale=1.0)  # ranks / n


def test_kurtosis_per_head_matches_scipy():
    rng = np.random.default_rng(1)
    vert = rng.standard_exponential((3, 2, 15))
    vert[..., -4:] = np.nan
    got = head_kurtosis(vert)
    for layer in range(3):
        for h in range(2):
            v = vert[layer, h]
            ref = stats.kurtosis(v[~np.isnan(v)], fisher=True, bias=True)
            # Moments of 11 values; the excess kurtosis is rounded at m4 / m2² = ref + 3.
            assert_fp64_close(got[layer, h], ref, terms=11, scale=ref + 3, msg=f"{layer},{h}")


def test_analyze_receivers_against_plain_computation():
    rng = np.random.default_rng(2)
    n_layers, n_heads, n_sent = 4, 3, 10
    traces = [
        TraceReceivers(f"t{k}", vert, head_kurtosis(vert))
        for k, vert in enumerate(rng.standard_exponential((5, n_layers, n_heads, n_sent)))
    ]
    opts = ReceiverOptions(top_k=4, n_splits=20)
    result = analyze_receivers(traces, opts)
    kurt = np.stack([t.kurtosis for t in traces])
    mean = kurt.mean(axis=0)
    ranked = sorted(
        ((mean[lay, h], lay, h) for lay in range(1, n_layers) for h in range(n_heads)),
        reverse=True,
    )
    assert result.heads == [(lay, h) for _, lay, h in ranked[:4]]
    assert all(layer != 0 for layer, _ in result.heads)
    for t in traces:
        ref = np.mean([t.vertical[lay, h] for lay, h in result.heads], axis=0)
        got = result.scores[t.trace_id]  # the mean of 4 heads' scores
        assert_fp64_close(got, ref, terms=4, scale=scale_of(t.vertical), msg=t.trace_id)
    expected = split_half_reliability(kurt[:, 1:].reshape(5, -1), n_splits=20, seed=0)
    # the same kurtoses in the same order, the same seed: the same call, bit for bit
    assert result.reliability.reliability == expected.reliability
    frame = result.heads_frame()
    assert len(frame) == n_layers * n_heads and frame["is_receiver"].sum() == 4
    assert analyze_receivers(traces[:1], opts).reliability is None


def test_select_heads_skips_nan_and_excluded_layers():
    k = np.array([[9.0, 8.0], [np.nan, 1.0], [3.0, 2.0]])
    assert select_heads(k, 2) == [(2, 0), (2, 1)]
    assert select_heads(k, 5, exclude_layers=()) == [(0, 0), (0, 1), (2, 0), (2, 1), (1, 1)]


def test_bad_inputs():
    with pytest.raises(InputError, match="proximity"):
        ReceiverOptions(proximity=-1)
    with pytest.raises(InputError, match="top_k"):
        ReceiverOptions(top_k=0)
    with pytest.raises(InputError, match="matrix"):
        vertical_scores(np.zeros((3, 4)))
    with pytest.raises(InputError, match="at least one trace"):
        analyze_receivers([])
    empty = TraceTokens("e", torch.zeros(1, 4, dtype=torch.long), ())
    with pytest.raises(InputError, match="at least one sentence"):
        trace_receivers(None, empty)  # checked before any model work
