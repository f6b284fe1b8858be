"""The adaptive design's stopping rule: a pure function of the rollouts recorded so far.

The fixed design samples every position ``n`` times. The adaptive design samples in rounds
and stops a position once the importances it enters are known well enough, so that a killed
run, resumed, takes the same decisions from the same rollouts (every rollout has its own
seed, :func:`mechscope.anchors.resampling.sampler.rollout_seed`).

**Notation** (one trace). Positions ``p = 0 … P-1`` (position ``p`` resamples chunk ``p``
with chunks ``0 … p-1`` kept, :mod:`mechscope.anchors.traces.trace`). Position ``p`` has drawn
``n_p`` rollouts, ``u_p`` of them usable (with an answer; all of them with
``count_no_answer``) and ``c_p`` correct. Chunk ``i = 0 … P-2`` has the resampling importance
``I_i = c_{i+1}/u_{i+1} - c_i/u_i`` (``resampling_importance_accuracy``).

**Interval.** The two rates come from independent rollouts (other prefixes, their own
seeds), so ``I_i`` gets Newcombe's hybrid score interval ``[L_i, H_i]`` for a difference of
independent binomial proportions (:func:`mechscope.stats.difference_intervals`), at level
``1 - α / m`` with ``α = 1 - confidence``. With ``correction="none"``, ``m = 1`` (each look
at its nominal level). With ``correction="looks"`` (default), ``m = 2K - 1`` with ``K = 1 +
⌈(n - n_min) / step⌉``, the number of sizes a position can take: the counts ``(n_i,
n_{i+1})`` a chunk is looked at with only grow, each through at most ``K`` values, so a chunk
is looked at with at most ``2K - 1`` distinct data, and by the union bound the interval it
stops with covers ``I_i`` with probability at least ``confidence`` whatever the stopping
(up to the Wilson intervals' own approximation). A position with no usable rollout gives
its chunks the interval ``[-1, 1]``.

**Stopping.** Chunk ``i`` is *resolved* when ``H_i - L_i <= width`` (*narrow*) or when
``-threshold < L_i`` and ``H_i < threshold`` (*negligible*: confidently below the threshold
in size). Position ``p`` is *open* while ``n_p < n`` (the fixed design's count is the cap)
and a chunk it enters (``p - 1`` or ``p``) is unresolved.

**Rounds.** Round 0 gives every position ``n_min`` rollouts. Every later round orders the
open positions by the widest interval among their unresolved chunks (widest first), then by
their prior score (highest first; a white-box score, :mod:`mechscope.anchors.adaptive.priors`), then
by position, and gives each ``min(step, n - n_p, budget left)`` in that order, with
``budget left = ⌊budget · n · P⌋ - Σ_p n_p``. Sampling ends when no position is open or the
budget is spent. A position ends *resolved*, at the *cap*, or out of *budget*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechscope.anchors.config import AdaptiveSettings
from mechscope.stats import difference_intervals

NARROW, NEGLIGIBLE, OPEN = "narrow", "negligible", "open"
RESOLVED, CAP, BUDGET = "resolved", "cap", "budget"


def max_looks(adaptive: AdaptiveSettings, n: int) -> int:
    """``2K - 1``: the most distinct counts a chunk's interval is computed from."""
    sizes = 1 + math.ceil(max(n - adaptive.n_min, 0) / adaptive.step)
    return 2 * sizes - 1


def decision_confidence(adaptive: AdaptiveSettings, n: int) -> float:
    """The level of every interval the rule computes (``1 - α / m``, see the module doc)."""
    looks = max_looks(adaptive, n) if adaptive.correction == "looks" else 1
    return 1.0 - (1.0 - adaptive.confidence) / looks


def trace_budget(adaptive: AdaptiveSettings, n: int, n_positions: int) -> int:
    """The most rollouts a trace of ``n_positions`` may draw: ``⌊budget · n · P⌋``."""
    return math.floor(adaptive.budget * n * n_positions + 1e-9)


@dataclass(frozen=True)
class Decision:
    """What the rule makes of a trace's counts: its chunks' importances and intervals, their
    status, and the rollouts each position gets next (all zero: sampling is over)."""

    importance: np.ndarray  # [P-1] I_i, NaN where a side has no usable rollout
    low: np.ndarray  # [P-1]
    high: np.ndarray  # [P-1]
    chunk_status: np.ndarray  # [P-1] NARROW | NEGLIGIBLE | OPEN
    is_open: np.ndarray  # [P] bool
    add: np.ndarray  # [P] int, rollouts of the next round
    budget_left: int

    @property
    def done(self) -> bool:
        return not self.add.any()

    def position_status(self) -> np.ndarray:  # [P] RESOLVED | CAP | BUDGET
        """How each position ended (meaningful once :attr:`done`)."""
        out = np.full(self.is_open.shape, RESOLVED, dtype=object)
        unresolved = self._unresolved_neighbours()
        out[unresolved & ~self.is_open] = CAP
        out[self.is_open] = BUDGET  # still open with nothing added: the budget is spent
        return out

    def _unresolved_neighbours(self) -> np.ndarray:  # [P] bool
        bad = self.chunk_status == OPEN
        out = np.zeros(bad.size + 1, dtype=bool)
        out[:-1] |= bad
        out[1:] |= bad
        return out


def chunk_intervals(
    usable: np.ndarray, correct: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(I, L, H)`` of every chunk from per-position counts ``[P]`` (each ``[P-1]``)."""
    usable, correct = np.asarray(usable), np.asarray(correct)
    return difference_intervals(correct[1:], usable[1:], correct[:-1], usable[:-1], confidence)


def classify(low: np.ndarray, high: np.ndarray, adaptive: AdaptiveSettings) -> np.ndarray:
    """NARROW, NEGLIGIBLE or OPEN per chunk (narrow wins when both hold)."""
    status = np.full(low.shape, OPEN, dtype=object)
    if adaptive.threshold is not None:
        tau = adaptive.threshold
        status[(low > -tau) & (high < tau)] = NEGLIGIBLE
    status[high - low <= adaptive.width + 1e-12] = NARROW
    return status


def decide(
    drawn: np.ndarray,
    usable: np.ndarray,
    correct: np.ndarray,
    n: int,
    adaptive: AdaptiveSettings,
    prior: np.ndarray | None = None,
) -> Decision:
    """The rule on one trace's counts (``[P]`` each, ``P >= 2``); ``n`` is the cap per
    position; ``prior`` ``[P]`` orders positions of equal width (higher first)."""
    drawn = np.asarray(drawn, dtype=np.int64)
    n_pos = drawn.size
    imp, low, high = chunk_intervals(usable, correct, decision_confidence(adaptive, n))
    status = classify(low, high, adaptive)
    budget_left = trace_budget(adaptive, n, n_pos) - int(drawn.sum())
    add = np.zeros(n_pos, dtype=np.int64)
    if (drawn == 0).all():  # round 0
        first = min(adaptive.n_min, n)
        add[:] = first if budget_left >= first * n_pos else 0
        return Decision(imp, low, high, status, drawn < n, add, budget_left)
    unresolved = status == OPEN
    width = np.where(unresolved, high - low, -np.inf)  # [P-1]
    widest = np.full(n_pos, -np.inf)  # [P] widest unresolved interval a position enters
    widest[:-1] = np.maximum(widest[:-1], width)
    widest[1:] = np.maximum(widest[1:], width)
    is_open = (drawn < n) & np.isfinite(widest)
    score = np.zeros(n_pos) if prior is None else np.nan_to_num(np.asarray(prior, float), nan=-1)
    order = sorted(np.flatnonzero(is_open), key=lambda p: (-widest[p], -score[p], p))
    left = budget_left
    for p in order:
        take = min(adaptive.step, n - int(drawn[p]), left)
        if take <= 0:
            break
        add[p], left = take, left - take
    return Decision(imp, low, high, status, is_open, add, budget_left)
