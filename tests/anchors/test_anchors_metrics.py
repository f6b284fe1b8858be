"""Per-chunk metrics and the sentence matrix on a small rollout set computed by hand.

Three chunks; rollouts from positions 0, 1, 2 (position 3 not sampled). The toy
embedder gives cosine 1 to sentences with the same words and a small cosine to
sentences with disjoint words, so "similar" / "different" are known exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechscope.anchors.config import KLOptions, MetricOptions
from mechscope.anchors.resampling.metrics import chunk_metrics, metrics_frame
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.anchors.resampling.sentence_matrix import sentence_matrix
from mechscope.errors import InputError
from tolerance import assert_exact, assert_fp64_close

CHUNKS = ["We add the numbers.", "The sum is five.", "So the answer is five."]


def ro(first: str, answer: str | None, position: int, text: str = "") -> Rollout:
    return Rollout(position, False, text or first, first, answer, answer == "5", answer is not None)


RESAMPLED = {
    0: [
        ro(CHUNKS[0], "5", 0),
        ro("Multiply both sides now.", "6", 0),
        ro("Multiply both sides now.", "5", 0),
        ro("Try something else entirely.", None, 0),
    ],
    1: [ro(CHUNKS[1], "5", 1), ro(CHUNKS[1], "5", 1), ro("Consider parity first.", "7", 1)],
    2: [ro(CHUNKS[2], "5", 2), ro(CHUNKS[2], "5", 2)],
}
FORCED = {
    0: [ro("", "5", 0), ro("", "6", 0)],
    1: [ro("", "5", 1), ro("", "5", 1)],
    2: [ro("", "5", 2), ro("", None, 2)],
}


def assert_rate(got: float, want: float) -> None:
    """A rate of counts, one minus a rate, or a difference of two: float64 quotients in
    [−1, 1], two roundings at scale 1."""
    assert_fp64_close(got, want, terms=2, scale=1.0)


def assert_kl(got: float, want: float, *, vocab: int, total: int) -> None:
    """A KL of add-one smoothed counts: ``vocab`` terms ``w · (log p − log q)``, each log a
    difference of logs of counts and totals, rounded at the largest, ``log(total)``."""
    assert_fp64_close(got, want, terms=vocab, scale=math.log(total))


@pytest.fixture
def metrics(word_embedder):
    return chunk_metrics(CHUNKS, RESAMPLED, FORCED, embedder=word_embedder)


def test_chunk0_by_hand(metrics):
    m = metrics[0]
    # R0 with an answer: {5, 6, 5}; K0 = R1: {5, 5, 7}
    assert_rate(m.accuracy, 2 / 3)
    assert_rate(m.resampling_importance_accuracy, 0.0)
    # V = {5, 6, 7}; p = (3, 2, 1)/6, q = (3, 1, 2)/6, weights (2/3, 1/3, 0)
    assert_kl(m.resampling_importance_kl, math.log(2) / 3, vocab=3, total=6)
    # D0 = the two "Multiply" rollouts (5 and 6), S0 = the copy of chunk 0 (5)
    assert m.n_dissimilar == 2
    assert_rate(m.different_trajectories_fraction, 2 / 3)
    assert_rate(m.overdeterminedness, 1 / 3)
    assert_rate(m.counterfactual_importance_accuracy, 1 / 2 - 2 / 3)
    # KL(D0 || K0 + S0): D = {5: 1, 6: 1}, ref = {5: 3, 7: 1}; p = (2, 2, 1)/5, q = (4, 1, 2)/7
    expected = 0.5 * math.log((2 / 5) / (4 / 7)) + 0.5 * math.log((2 / 5) / (1 / 7))
    assert_kl(m.counterfactual_importance_kl, expected, vocab=3, total=7)
    # forced: F0 = {5, 6} (acc 1/2), F1 = {5, 5} (acc 1); p = (2, 2)/4, q = (3, 1)/4
    assert_rate(m.forced_importance_accuracy, 0.5)
    assert_kl(m.forced_importance_kl, 0.5 * math.log(4 / 3), vocab=2, total=4)
    assert (m.n_rollouts, m.n_no_answer, m.n_forced, m.n_forced_no_answer) == (4, 1, 2, 0)


def test_chunk1_by_hand(metrics):
    m = metrics[1]
    assert_rate(m.accuracy, 2 / 3)
    assert_rate(m.resampling_importance_accuracy, 1 / 3)
    # R1 = {5: 2, 7: 1}, K1 = {5: 2}; p = (3, 2)/5, q = (3, 1)/4, weights (2/3, 1/3)
    expected = 2 / 3 * math.log((3 / 5) / (3 / 4)) + 1 / 3 * math.log((2 / 5) / (1 / 4))
    assert_kl(m.resampling_importance_kl, expected, vocab=2, total=5)
    assert_rate(m.different_trajectories_fraction, 1 / 3)
    assert_rate(m.overdeterminedness, 1 / 3)
    assert_rate(m.counterfactual_importance_accuracy, -1.0)
    # D1 = {7: 1}, ref = K1 + S1 = {5: 4}; p(7) = 2/3, q(7) = 1/6, weight 1
    assert_kl(m.counterfactual_importance_kl, math.log(4), vocab=2, total=6)
    # F2 = {5, no answer}: the unanswered one is left out, so both accuracies are 1
    assert_rate(m.forced_importance_accuracy, 0.0)
    assert m.forced_importance_kl == 0.0  # one outcome: log(c + 1) − log(n + 1) = 0 exactly


def test_last_chunk_without_kept_rollouts_is_nan(metrics):
    m = metrics[2]
    assert_rate(m.accuracy, 1.0)
    assert_rate(m.overdeterminedness, 0.5)
    assert_rate(m.different_trajectories_fraction, 0.0)
    for name in (
        "resampling_importance_accuracy",
        "resampling_importance_kl",
        "counterfactual_importance_accuracy",
        "counterfactual_importance_kl",
        "forced_importance_accuracy",
        "forced_importance_kl",
    ):
        assert math.isnan(getattr(m, name)), name
    assert (m.n_forced, m.n_forced_no_answer) == (2, 1)


def test_counting_rollouts_without_answer(word_embedder):
    opts = MetricOptions(kl=KLOptions(count_no_answer=True))
    m = chunk_metrics(CHUNKS, RESAMPLED, FORCED, embedder=word_embedder, options=opts)[0]
    assert_rate(m.accuracy, 2 / 4)
    assert_rate(m.resampling_importance_accuracy, 2 / 3 - 2 / 4)
    assert_rate(m.different_trajectories_fraction, 3 / 4)
    assert_rate(m.overdeterminedness, 1 / 4)


def test_counterfactual_against_kept_only(word_embedder):
    opts = MetricOptions(cf_reference="kept")
    m = chunk_metrics(CHUNKS, RESAMPLED, FORCED, embedder=word_embedder, options=opts)[0]
    # KL(D0 || K0): D = {5: 1, 6: 1}, K0 = {5: 2, 7: 1}; p = (2, 2, 1)/5, q = (3, 1, 2)/6
    expected = 0.5 * math.log((2 / 5) / (3 / 6)) + 0.5 * math.log((2 / 5) / (1 / 6))
    assert_kl(m.counterfactual_importance_kl, expected, vocab=3, total=6)


def test_without_embedder_semantic_metrics_are_nan():
    m = chunk_metrics(CHUNKS, RESAMPLED)[0]
    assert math.isnan(m.different_trajectories_fraction)
    assert math.isnan(m.counterfactual_importance_kl)
    assert_rate(m.overdeterminedness, 1 / 3)
    assert math.isnan(m.forced_importance_accuracy)


def test_frame_and_bad_input(metrics):
    frame = metrics_frame(metrics)
    assert list(frame["chunk_index"]) == [0, 1, 2]
    assert frame.loc[0, "n_no_answer"] == 1
    with pytest.raises(InputError):
        chunk_metrics([], RESAMPLED)
    with pytest.raises(InputError):
        chunk_metrics(CHUNKS, {})


def test_sentence_matrix_by_hand(word_embedder):
    chunks = ["Alpha beta gamma.", "Delta epsilon zeta.", "Eta theta iota."]

    def r(text: str, p: int) -> Rollout:
        return Rollout(p, False, text, "", None, False, False)

    resampled = {
        0: [r("Alpha beta gamma. Delta epsilon zeta.", 0), r("Kappa lambda mu. Nu xi omicron.", 0)],
        1: [r("Delta epsilon zeta. Eta theta iota.", 1), r("Delta epsilon zeta. Pi rho sigma.", 1)],
        2: [r("Eta theta iota.", 2), r("Tau upsilon phi.", 2)],
        3: [r("Done now here.", 3)],
    }
    # rates of sentence presence per position: p0 = (.5, .5, 0), p1 = (0, 1, .5),
    # p2 = (0, 0, .5), p3 = (0, 0, 0); M[i, j] = rate_{i+1}[j] - rate_i[j] for j > i
    expected = np.full((3, 3), np.nan)
    expected[0, 1], expected[0, 2], expected[1, 2] = 1 - 0.5, 0.5 - 0.0, 0.5 - 0.5
    got = sentence_matrix(chunks, resampled, word_embedder)
    assert_exact(got, expected)  # rates of 2 rollouts and their differences: binary fractions
    # without position 3 the last row stays NaN; without position 1 rows 0 and 1 do
    got = sentence_matrix(chunks, {p: v for p, v in resampled.items() if p != 1}, word_embedder)
    assert np.isnan(got[:2]).all()
