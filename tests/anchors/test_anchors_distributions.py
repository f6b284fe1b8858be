"""Accuracy and KL between rollout sets, against hand computations and scipy."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from anchors_helpers import folder_id, load_json, reference_folders
from scipy.stats import entropy

from mechscope.anchors.config import KLOptions
from mechscope.anchors.resampling.distributions import (
    NO_ANSWER,
    accuracy,
    answer_counts,
    answer_kl,
    kl_from_counts,
    next_minus_this,
)
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.errors import InputError
from tolerance import assert_exact, assert_fp64_close


def _log_scale(*amounts: float) -> float:
    """A KL of smoothed counts sums ``w · (log p − log q)`` with ``log p = log(c + α) −
    log(n + α·V)``: each log is rounded at its own magnitude, the largest ``|log|`` of the
    smoothed counts and totals (``amounts``)."""
    return max(abs(math.log(a)) for a in amounts)


def ro(answer: str | None, gold: str = "a") -> Rollout:
    return Rollout(0, False, "", "", answer, answer == gold, answer is not None)


P = [ro("a"), ro("a"), ro("b"), ro(None)]
Q = [ro("a"), ro("b"), ro("b"), ro("c")]


def test_accuracy_and_no_answer_choice():
    # A count over a count: one division, as in the literal.
    assert accuracy(P) == 2 / 3  # the unanswered one left out
    assert accuracy(P, count_no_answer=True) == 2 / 4
    assert math.isnan(accuracy([]))
    assert math.isnan(accuracy([ro(None)]))
    assert answer_counts(P, KLOptions()) == Counter({"a": 2, "b": 1})
    assert answer_counts(P, KLOptions(count_no_answer=True))[NO_ANSWER] == 1


def test_kl_unsmoothed_weighting_by_hand():
    # P = {a: 2, b: 1}, Q = {a: 1, b: 2, c: 1}; V = 3, alpha = 1
    p_s = {"a": 3 / 6, "b": 2 / 6, "c": 1 / 6}
    q_s = {"a": 2 / 7, "b": 3 / 7, "c": 2 / 7}
    expected = 2 / 3 * math.log(p_s["a"] / q_s["a"]) + 1 / 3 * math.log(p_s["b"] / q_s["b"])
    got = answer_kl(P, Q, KLOptions(alpha=1.0))
    assert_fp64_close(got, expected, terms=3, scale=_log_scale(1, 6, 7))


def test_kl_smoothed_weighting_matches_scipy():
    for alpha in (1e-9, 0.5, 1.0, 3.0):
        p = np.array([2 + alpha, 1 + alpha, alpha]) / (3 + 3 * alpha)
        q = np.array([1 + alpha, 2 + alpha, 1 + alpha]) / (4 + 3 * alpha)
        got = answer_kl(P, Q, KLOptions(alpha=alpha, weighting="smoothed"))
        scale = _log_scale(alpha, 3 + 3 * alpha, 4 + 3 * alpha)
        assert_fp64_close(got, entropy(p, q), terms=3, scale=scale, msg=f"alpha {alpha}")


def test_kl_with_no_answer_as_an_outcome():
    # P = {a: 2, b: 1, none: 1}, Q = {a: 1, b: 2, c: 1}; V = 4
    p = np.array([3, 2, 1, 2]) / 8  # a, b, c, none
    q = np.array([2, 3, 2, 1]) / 8
    w = np.array([2, 1, 0, 1]) / 4
    expected = float(np.sum(w * np.log(p / q)))
    got = answer_kl(P, Q, KLOptions(count_no_answer=True))
    assert_fp64_close(got, expected, terms=4, scale=_log_scale(1, 8, 8))


def test_kl_of_correctness_matches_published_binary_formula():
    # P: 2 of 3 correct, Q: 1 of 4 correct, alpha = 1
    p, q = (2 + 1) / (3 + 2), (1 + 1) / (4 + 2)
    expected = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    opts = KLOptions(distribution="correctness", weighting="smoothed")
    assert_fp64_close(answer_kl(P, Q, opts), expected, terms=2, scale=_log_scale(1, 5, 6))


def test_kl_edge_cases():
    assert kl_from_counts(Counter({"a": 3}), Counter({"a": 5})) == 0.0
    assert math.isnan(kl_from_counts(Counter(), Counter({"a": 1})))
    assert math.isnan(answer_kl([ro(None)], Q, KLOptions()))
    with pytest.raises(InputError):
        KLOptions(alpha=0)
    with pytest.raises(InputError):
        KLOptions(weighting="sideways")  # type: ignore[arg-type]


def test_next_minus_this():
    # Differences of binary fractions: exact.
    assert_exact(next_minus_this([0.5, 0.75, 0.25]), np.array([0.25, -0.5, np.nan]))


@pytest.mark.parametrize("folder", reference_folders(), ids=folder_id)
def test_resampling_importance_convention_matches_published(reference_dir, folder):
    """Published resampling_importance_accuracy = accuracy[i + 1] - accuracy[i]."""
    rows = load_json(folder / "chunks_labeled.json")
    got = next_minus_this([r["accuracy"] for r in rows])
    published = np.array([r["resampling_importance_accuracy"] for r in rows])
    # The published code subtracts the same two float64 accuracies: equal bit for bit.
    assert_exact(got[:-1], published[:-1])
    assert published[-1] == 0.0  # the published files write 0 where we write NaN
