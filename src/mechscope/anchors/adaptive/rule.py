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

**Stopping.** What makes a chunk *settled* depends on the question asked (``target``,
:mod:`mechscope.anchors.adaptive.targets`): today's *threshold* rule settles a chunk whose
interval is at most ``width`` wide (*narrow*) or inside ``(-threshold, threshold)``
(*negligible*); the *topk* rules settle a chunk surely *above* or *below* the boundary of the
top ``k``. Position ``p`` is *open* while ``n_p < cap`` (the fixed design's ``n`` unless
``cap`` is set) and a chunk it enters (``p - 1`` or ``p``) is unsettled.

**Rounds.** Round 0 gives every position ``n_min`` rollouts. Every later round orders the
open positions by the widest interval among their unsettled chunks (widest first), then by
their prior score (highest first; a white-box score, :mod:`mechscope.anchors.adaptive.priors`), then
by position, and gives each ``min(step, cap - n_p, budget left)`` in that order, with
``budget left = ⌊budget · n · P⌋ - Σ_p n_p``. Sampling ends when no position is open or the
budget is spent. A position ends *resolved*, at the *cap*, or out of *budget*.

:func:`decide_rows` is the rule on many runs of one trace at once (rows of ``[R, P]``
counts, the simulation's seeds); :func:`decide` on one, as the sampler's driver calls it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechscope.anchors.adaptive.targets import (
    ABOVE,
    BELOW,
    C_OPEN,
    NARROW,
    NEGLIGIBLE,
    OPEN,
    STATUSES,
    chunk_status,
)
from mechscope.anchors.config import AdaptiveSettings
from mechscope.stats import difference_intervals

__all__ = ["ABOVE", "BELOW", "NARROW", "NEGLIGIBLE", "OPEN", "Decision", "decide", "decide_rows"]
RESOLVED, CAP, BUDGET = "resolved", "cap", "budget"


def max_looks(adaptive: AdaptiveSettings, n: int) -> int:
    """``2K - 1``: the most distinct counts a chunk's interval is computed from."""
    sizes = 1 + math.ceil(max(adaptive.cap_for(n) - adaptive.n_min, 0) / adaptive.step)
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
    chunk_status: np.ndarray  # [P-1] NARROW | NEGLIGIBLE | ABOVE | BELOW | OPEN
    is_open: np.ndarray  # [P] bool
    add: np.ndarray  # [P] int, rollouts of the next round
    budget_left: int

    @property
    def done(self) -> bool:
        return not self.add.any()

    def position_status(self) -> np.ndarray:  # [P] RESOLVED | CAP | BUDGET
        """How each position ended (meaningful once :attr:`done`)."""
        out = np.full(self.is_open.shape, RESOLVED, dtype=object)
        unresolved = _touches(self.chunk_status == OPEN)
        out[unresolved & ~self.is_open] = CAP
        out[self.is_open] = BUDGET  # still open with nothing added: the budget is spent
        return out


@dataclass(frozen=True)
class RowDecisions:
    """:class:`Decision` of many runs of one trace (rows), status as codes (``STATUSES``)."""

    importance: np.ndarray  # [R, P-1]
    low: np.ndarray  # [R, P-1]
    high: np.ndarray  # [R, P-1]
    status: np.ndarray  # [R, P-1] int8 codes
    is_open: np.ndarray  # [R, P] bool
    add: np.ndarray  # [R, P] int


def _touches(chunks: np.ndarray) -> np.ndarray:  # [..., P-1] bool -> [..., P] bool
    """Positions entering a flagged chunk (position ``p`` enters chunks ``p - 1`` and ``p``)."""
    out = np.zeros((*chunks.shape[:-1], chunks.shape[-1] + 1), dtype=bool)
    out[..., :-1] |= chunks
    out[..., 1:] |= chunks
    return out


def chunk_intervals(
    usable: np.ndarray, correct: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(I, L, H)`` of every chunk from per-position counts ``[..., P]`` (each ``[..., P-1]``)."""
    usable, correct = np.asarray(usable), np.asarray(correct)
    return difference_intervals(
        correct[..., 1:], usable[..., 1:], correct[..., :-1], usable[..., :-1], confidence
    )


def decide_rows(
    drawn: np.ndarray,
    usable: np.ndarray,
    correct: np.ndarray,
    n: int,
    adaptive: AdaptiveSettings,
    prior: np.ndarray | None = None,
) -> RowDecisions:
    """The rule on ``R`` runs of one trace (counts ``[R, P]``, ``P >= 2``); ``n`` is the
    fixed design's rollouts per position (the cap unless ``adaptive.cap``); ``prior`` ``[P]``
    orders positions of equal width (higher first)."""
    drawn = np.asarray(drawn, dtype=np.int64)
    rows, n_pos = drawn.shape
    cap = adaptive.cap_for(n)
    level = decision_confidence(adaptive, n)
    imp, low, high = chunk_intervals(usable, correct, level)
    status = chunk_status(imp, low, high, usable, correct, adaptive, level)
    left = trace_budget(adaptive, n, n_pos) - drawn.sum(axis=1, keepdims=True)  # [R, 1]
    width = np.where(status == C_OPEN, high - low, -np.inf)  # [R, P-1]
    widest = np.full((rows, n_pos), -np.inf)  # [R, P] widest unsettled interval entered
    widest[:, :-1] = np.maximum(widest[:, :-1], width)
    widest[:, 1:] = np.maximum(widest[:, 1:], width)
    is_open = (drawn < cap) & np.isfinite(widest)
    take = np.where(is_open, np.minimum(adaptive.step, cap - drawn), 0)  # [R, P]
    score = np.zeros(n_pos) if prior is None else np.nan_to_num(np.asarray(prior, float), nan=-1)
    keys = (np.broadcast_to(np.arange(n_pos), drawn.shape), np.broadcast_to(-score, drawn.shape))
    order = np.lexsort((*keys, -widest), axis=-1)  # [R, P] widest, then prior, then position
    ordered = np.take_along_axis(take, order, axis=-1)
    before = np.cumsum(ordered, axis=-1) - ordered  # budget handed out ahead of each
    add = np.zeros_like(drawn)
    np.put_along_axis(add, order, np.clip(left - before, 0, ordered), axis=-1)
    first = (drawn == 0).all(axis=1)  # round 0: n_min everywhere, if the budget allows
    if first.any():
        n0 = min(adaptive.n_min, cap)
        add[first] = np.where(left[first] >= n0 * n_pos, n0, 0)
        is_open[first] = drawn[first] < cap
    return RowDecisions(imp, low, high, status, is_open, add)


def decide(
    drawn: np.ndarray,
    usable: np.ndarray,
    correct: np.ndarray,
    n: int,
    adaptive: AdaptiveSettings,
    prior: np.ndarray | None = None,
) -> Decision:
    """The rule on one trace's counts (``[P]`` each, ``P >= 2``); see :func:`decide_rows`."""
    row = lambda v: np.asarray(v)[None, :]  # noqa: E731
    d = decide_rows(row(drawn), row(usable), row(correct), n, adaptive, prior)
    budget_left = trace_budget(adaptive, n, np.size(drawn)) - int(np.sum(drawn))
    return Decision(
        d.importance[0], d.low[0], d.high[0], STATUSES[d.status[0]], d.is_open[0], d.add[0],
        budget_left,
    )  # fmt: skip
