"""Accuracy and answer distributions of a set of rollouts, and the KL between two sets.

Choices that differ between published versions of the analysis are options:

- ``count_no_answer``: the published numbers leave rollouts without an answer out of
  every denominator (False, the default). With True they count as wrong for accuracy
  and as one more answer, ``"<no answer>"``, in answer distributions.
- ``alpha``: add-alpha (Laplace) smoothing of the answer counts over the vocabulary
  ``V`` (the union of answers seen in the two sets): ``p(a) = (c(a) + alpha) / (N + alpha V)``.
  Published runs used 1e-9, 0.5 and 1.0; 1.0 is the default here.
- ``weighting``: the published code weighs the log ratio by the unsmoothed ``c(a) / N``
  (``"unsmoothed"``, default); ``"smoothed"`` gives the textbook KL of the two smoothed
  distributions.
- ``distribution``: ``"answers"`` (normalised answer strings) or ``"correctness"``
  (a two-outcome distribution: correct / wrong).

KL is computed in fp64 in log space and clipped at 0 (the unsmoothed weighting can dip
below 0 by rounding). An empty set gives NaN, never a silent 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from mechscope.anchors.config import KLOptions
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.data.math_answers import normalize_answer

NO_ANSWER = "<no answer>"


def usable(rollouts: Iterable[Rollout], count_no_answer: bool) -> list[Rollout]:
    """The rollouts that enter denominators under the ``count_no_answer`` choice."""
    return [r for r in rollouts if count_no_answer or r.has_answer]


def accuracy(rollouts: Sequence[Rollout], *, count_no_answer: bool = False) -> float:
    """Fraction correct (NaN for an empty set)."""
    kept = usable(rollouts, count_no_answer)
    if not kept:
        return math.nan
    return sum(r.is_correct for r in kept) / len(kept)


def answer_counts(rollouts: Sequence[Rollout], options: KLOptions) -> Counter[str]:
    """Histogram of normalised answers (or of correct/wrong)."""
    counts: Counter[str] = Counter()
    for r in usable(rollouts, options.count_no_answer):
        if options.distribution == "correctness":
            counts["correct" if r.is_correct else "wrong"] += 1
        elif r.has_answer and r.answer is not None:
            counts[normalize_answer(r.answer)] += 1
        else:
            counts[NO_ANSWER] += 1
    return counts


def kl_from_counts(
    p_counts: Counter[str],
    q_counts: Counter[str],
    *,
    alpha: float = 1.0,
    weighting: str = "unsmoothed",
    vocabulary: Iterable[str] | None = None,
) -> float:
    """KL(P || Q) of two answer histograms with add-alpha smoothing (NaN if one is empty)."""
    n_p, n_q = sum(p_counts.values()), sum(q_counts.values())
    if n_p == 0 or n_q == 0:
        return math.nan
    vocab = sorted(set(vocabulary) if vocabulary is not None else set(p_counts) | set(q_counts))
    cp = np.array([p_counts.get(a, 0) for a in vocab], dtype=np.float64)  # [V]
    cq = np.array([q_counts.get(a, 0) for a in vocab], dtype=np.float64)  # [V]
    v = len(vocab)
    log_p = np.log(cp + alpha) - np.log(n_p + alpha * v)  # [V]
    log_q = np.log(cq + alpha) - np.log(n_q + alpha * v)  # [V]
    weights = cp / n_p if weighting == "unsmoothed" else np.exp(log_p)
    return max(0.0, float(np.sum(weights * (log_p - log_q))))


def answer_kl(p: Sequence[Rollout], q: Sequence[Rollout], options: KLOptions) -> float:
    """KL between the answer distributions of two rollout sets."""
    vocab = ("correct", "wrong") if options.distribution == "correctness" else None
    return kl_from_counts(
        answer_counts(p, options),
        answer_counts(q, options),
        alpha=options.alpha,
        weighting=options.weighting,
        vocabulary=vocab,
    )


def next_minus_this(values: Sequence[float]) -> np.ndarray:
    """``values[i + 1] - values[i]`` per index, NaN for the last one. [n] → [n]"""
    arr = np.asarray(values, dtype=np.float64)  # [n]
    out = np.full(arr.shape, np.nan)
    out[:-1] = arr[1:] - arr[:-1]
    return out
