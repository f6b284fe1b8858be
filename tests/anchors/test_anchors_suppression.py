"""Attention suppression against a hand-masked eager model and plain loops.

Per-token KLs are compared up to what the rounding of both runs' logits can do to a KL
(``divergence_bound``: first order ``2·t·√(2·KL)``, plus ``t²``; t the logits' rounding
tolerance); the matrix averages ``log(KL + 1e-9)``, which moves by ``δKL / (KL + 1e-9)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from whitebox_helpers import eager_copy, masked_logits, tiny_setup

from mechscope.anchors.attention.suppression import (
    position_kl,
    row_normalized,
    sentence_matrix_from_kl,
    suppression_matrix,
)
from mechscope.anchors.config import SuppressionOptions
from mechscope.errors import InputError
from tolerance import FACTOR, assert_fp64_close, assert_within, depth_of, divergence_bound, scale_of

EPS = 1e-9


@pytest.fixture(scope="module")
def tiny():
    return tiny_setup()


@pytest.fixture(scope="module")
def reference_kl(tiny):
    """KL(base ‖ suppressed) per source sentence and logits position, from eager models
    with a hand-built 4-D mask, in fp64: ``[n_sent, seq]``."""
    lm, _, _, tokens = tiny
    eager = eager_copy(lm)
    base = torch.log_softmax(masked_logits(eager, tokens.input_ids, None).double(), -1)
    rows = []
    for span in tokens.ranges:
        sup = torch.log_softmax(masked_logits(eager, tokens.input_ids, span).double(), -1)
        rows.append((base.exp() * (base - sup)).sum(-1).clamp_min(0).numpy())  # [seq]
    return np.stack(rows)


@pytest.fixture(scope="module")
def kl_bound(tiny, reference_kl):
    """Per entry of ``reference_kl``, what rounding of the logits may do to it."""
    lm, _, _, tokens = tiny
    top = float(masked_logits(eager_copy(lm), tokens.input_ids, None).abs().max())
    return divergence_bound(reference_kl, 2 * top, depth_of(lm))  # suppressed logits: ≤ 2·top


def _loop_matrix(kl, ranges, shift: int, first_tokens=None, f=None) -> np.ndarray:
    """M[target, source] by plain loops: token t of the target is scored at position t-shift,
    counted when that position is at or after the end of the source span; the mean of
    ``f(kl)`` (default ``log(kl + EPS)``)."""
    f = f or (lambda x: math.log(x + EPS))
    n = len(ranges)
    out = np.full((n, n), np.nan)
    for j, (sj, ej) in enumerate(ranges):
        if first_tokens is not None:
            ej = min(ej, sj + first_tokens)
        for i, (_, ei) in enumerate(ranges):
            vals = []
            for t in range(sj, ej):
                p = t - shift
                if 0 <= p < kl.shape[1] and p >= ei:
                    vals.append(f(kl[i, p]))
            if vals:
                out[j, i] = sum(vals) / len(vals)
    return out


def _matrix_bound(kl, bound, ranges) -> np.ndarray:
    """How far each matrix entry may move: the mean of ``bound / (kl + EPS)``."""
    return _loop_matrix(bound / (kl + EPS), ranges, shift=1, f=float)


def test_suppression_equals_hand_masked_eager(tiny, reference_kl, kl_bound):
    _, eng, _, tokens = tiny
    result = suppression_matrix(eng, tokens, SuppressionOptions(rows_per_chunk=4))
    ends = [end for _, end in tokens.ranges]
    for i, end in enumerate(ends):  # every reachable position
        got, want = result.token_kl[i, end:], reference_kl[i, end:]
        assert_within(got, want, kl_bound[i, end:], msg=f"KL of sentence {i}")
    assert (reference_kl[:, -1] > FACTOR * kl_bound[:, -1]).all()  # suppression changes much
    expected = _loop_matrix(reference_kl, tokens.ranges, shift=1)
    bound = _matrix_bound(reference_kl, kl_bound, tokens.ranges)
    assert_within(result.matrix, expected, bound, msg="matrix")
    assert np.isnan(np.triu(result.matrix + 1.0)[np.triu_indices(tokens.n_sentences)]).all()
    frame = result.to_frame()
    assert len(frame) == np.sum(~np.isnan(expected))
    assert (frame["target"] > frame["source"]).all()


def test_unreachable_positions_are_unchanged(tiny):
    _, eng, _, tokens = tiny
    spans = tokens.spans()[2:5]
    kl = position_kl(eng, tokens.input_ids, spans, SuppressionOptions(rows_per_chunk=3))
    first = int(spans[:, 1].min())
    assert np.isnan(kl[:, :first]).all()
    for r, (_, end) in enumerate(spans.tolist()):
        # queries before the span's end never see it: their rows are the unsuppressed pass's
        assert np.nanmax(kl[r, first:end], initial=0.0) == 0.0


def test_batched_rows_equal_one_sentence_at_a_time(tiny, kl_bound):
    _, eng, _, tokens = tiny
    one = suppression_matrix(eng, tokens, SuppressionOptions(rows_per_chunk=1))
    many = suppression_matrix(eng, tokens, SuppressionOptions(rows_per_chunk=64))
    for i, (_, end) in enumerate(tokens.ranges):  # reachable positions of each row
        got, want = many.token_kl[i, end:], one.token_kl[i, end:]
        assert_within(got, want, kl_bound[i, end:], msg=f"KL of sentence {i}")
    bound = _matrix_bound(one.token_kl, kl_bound, tokens.ranges)
    assert_within(many.matrix, one.matrix, bound, msg="matrix")


@pytest.mark.parametrize("reuse", [True, False])
def test_equals_eager_with_and_without_prefix_reuse(tiny, reference_kl, kl_bound, reuse):
    _, eng, _, tokens = tiny
    opts = SuppressionOptions(rows_per_chunk=3, reuse_prefix=reuse)
    result = suppression_matrix(eng, tokens, opts)
    for i, (_, end) in enumerate(tokens.ranges):
        got, want = result.token_kl[i, end:], reference_kl[i, end:]
        assert_within(got, want, kl_bound[i, end:], msg=f"KL of sentence {i}")


def test_alignment_and_first_tokens_plain_loop(tiny, reference_kl):
    _, _, _, tokens = tiny
    kl = reference_kl
    # Means of log(KL + ε) over a sentence's tokens: float64 sums as long as the longest
    # sentence, at the logs' largest magnitude.
    terms = max(end - start for start, end in tokens.ranges)
    scale = scale_of(np.log(kl + EPS))
    same = SuppressionOptions(alignment="same_position")
    got = sentence_matrix_from_kl(kl, tokens.ranges, same)
    want = _loop_matrix(kl, tokens.ranges, shift=0)
    assert_fp64_close(got, want, terms=terms, scale=scale, msg="same position")
    first = SuppressionOptions(first_tokens=2)
    got = sentence_matrix_from_kl(kl, tokens.ranges, first)
    want = _loop_matrix(kl, tokens.ranges, shift=1, first_tokens=2)
    assert_fp64_close(got, want, terms=2, scale=scale, msg="first tokens")


def test_row_normalized_plain_loop():
    m = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, np.nan], [2.0, 4.0, np.nan]])
    got = row_normalized(m)
    assert np.isnan(got[0]).all()
    assert got[1, 0] == 0.0
    assert got[2, 0] == -1.0 and got[2, 1] == 1.0  # 2 − 3 and 4 − 3: nothing rounds


def test_empty_source_sentence_is_nan():
    kl = np.full((2, 6), 0.5)
    m = sentence_matrix_from_kl(kl, [(3, 3), (3, 6)])
    assert np.isnan(m[:, 0]).all()


def test_bad_options():
    with pytest.raises(InputError, match="epsilon"):
        SuppressionOptions(epsilon=0)
    with pytest.raises(InputError, match="alignment"):
        SuppressionOptions(alignment="later")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="rows_per_chunk"):
        SuppressionOptions(rows_per_chunk=0)
    with pytest.raises(InputError, match="one per sentence"):
        sentence_matrix_from_kl(np.zeros((3, 5)), [(0, 2)])
