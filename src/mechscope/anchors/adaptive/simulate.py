"""Validation of the adaptive designs on the published traces, by simulation.

The published per-position accuracies (:mod:`mechscope.anchors.adaptive.published`) are
taken as each position's true answer rate, and the published importances (their
differences) as the truth; a rollout is a Bernoulli draw. **Every design reads the same
rollouts**: for each trace and seed, position ``p`` gets one stream of draws, and a design
that takes ``m`` rollouts there takes the stream's first ``m`` (as a run's rollout ``k`` has
the same seed in every design). All seeds of a trace run at once (rows of
:func:`mechscope.anchors.adaptive.rule.decide_rows`, the rule the sampler's driver calls).

Designs: adaptive settings (run round by round until no position is open), or an int ``N``
(the fixed design, ``N`` per position). Each adaptive design also gets its **uniform
baseline at equal cost**: the fixed design with ``round(rollouts / P)`` per position, on the
same streams, for the same run. Scores (:mod:`mechscope.anchors.adaptive.scores`) are taken
against the truth; ``coverage`` is that of every design's Newcombe interval **at the same
level** (``confidence``, one look, from the counts it ended with).

**Sensitivity.** With ``posterior=True`` each seed first draws the true rates from each
position's posterior ``Beta(1 + 100 a, 1 + 100 (1 - a))`` (``a`` the published accuracy of
100 rollouts; 28 % of them are exactly 0 or 1) and scores against that draw's importances.

Seeded: ``numpy.random.default_rng([seed, trace index, run])``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.published import PublishedTrace
from mechscope.anchors.adaptive.rule import chunk_intervals, decide_rows
from mechscope.anchors.adaptive.scores import coverage_rows, spearman_rows, top_overlap_rows
from mechscope.anchors.config import AdaptiveSettings
from mechscope.progress import track

Design = AdaptiveSettings | int
#: rollouts of one published position (the published design)
PUBLISHED_N = 100


def uniform_name(name: str) -> str:
    """The name of an adaptive design's uniform baseline at equal cost."""
    return f"uniform = {name}"


def draw_streams(
    accuracy: np.ndarray, runs: int, length: int, seed: Sequence[int], posterior: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(cumulative correct [R, P, length + 1] int16, true rates [R, P])``: run ``r``'s
    position ``p`` has ``cum[r, p, m]`` correct among its first ``m`` rollouts."""
    n_pos = accuracy.size
    cum = np.zeros((runs, n_pos, length + 1), dtype=np.int16)
    rates = np.empty((runs, n_pos))
    for r in range(runs):
        rng = np.random.default_rng([*seed, r])
        rate = accuracy
        if posterior:
            k = np.round(accuracy * PUBLISHED_N)
            rate = rng.beta(1 + k, 1 + PUBLISHED_N - k)
        rates[r] = rate
        # [length, P] filled row by row: rollout k's draws do not depend on ``length``
        hits = rng.random((length, n_pos)) < rate[None, :]
        np.cumsum(hits.T, axis=-1, out=cum[r, :, 1:])
    return cum, rates


def counts_at(cum: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """Correct rollouts among the first ``drawn [R, P]`` of each stream. [R, P]"""
    return np.take_along_axis(cum, drawn[..., None].astype(np.int64), axis=-1)[..., 0]


def run_adaptive(cum: np.ndarray, n: int, adaptive: AdaptiveSettings) -> np.ndarray:
    """Rollouts per position ``[R, P]`` the rule ends with on every stream."""
    drawn = np.zeros(cum.shape[:2], dtype=np.int64)
    while True:
        d = decide_rows(drawn, drawn, counts_at(cum, drawn), n, adaptive)
        if not d.add.any():
            return drawn
        drawn += d.add


def adaptive_rollouts(
    accuracy: np.ndarray, n: int, adaptive: AdaptiveSettings, runs: int, seed: int = 0
) -> np.ndarray:
    """Rollouts per position ``[R, P]`` of ``runs`` simulated adaptive runs on the rates."""
    cum, _ = draw_streams(accuracy, runs, adaptive.cap_for(n), [seed], posterior=False)
    return run_adaptive(cum, n, adaptive)


def _scores(cum, drawn, truth, confidence, fixed_total) -> dict[str, np.ndarray]:
    correct = counts_at(cum, drawn)
    imp, low, high = chunk_intervals(drawn, correct, confidence)
    return {
        "rollouts": drawn.sum(axis=1),
        "share": drawn.sum(axis=1) / fixed_total,
        "spearman": spearman_rows(imp, truth),
        "top5": top_overlap_rows(imp, truth),
        "coverage": coverage_rows(low, high, truth),
    }


def simulate(
    traces: Sequence[PublishedTrace],
    designs: dict[str, Design],
    *,
    n: int = 100,
    seeds: int = 20,
    seed: int = 0,
    confidence: float = 0.95,
    posterior: bool = False,
) -> pd.DataFrame:
    """One row per (design, trace, seed) with the scores above; every adaptive design is
    followed by its uniform baseline at equal cost (:func:`uniform_name`)."""
    caps = [d.cap_for(n) if isinstance(d, AdaptiveSettings) else int(d) for d in designs.values()]
    length = max([*caps, n])
    frames = []
    for t_index, trace in enumerate(track(traces, "anchors: simulating")):
        cum, rates = draw_streams(trace.accuracy, seeds, length, [seed, t_index], posterior)
        truth = np.diff(rates, axis=1) if posterior else trace.importance[None, :]
        fixed_total = n * trace.n_positions
        for name, design in designs.items():
            if isinstance(design, AdaptiveSettings):
                drawn = run_adaptive(cum, n, design)
                out = {name: drawn}
                even = np.rint(drawn.sum(axis=1) / trace.n_positions).astype(np.int64)
                even = np.clip(even, 1, length)[:, None]
                out[uniform_name(name)] = np.broadcast_to(even, drawn.shape)
            else:
                out = {name: np.full(cum.shape[:2], int(design), dtype=np.int64)}
            for key, drawn in out.items():
                scores = _scores(cum, drawn, truth, confidence, fixed_total)
                head = {"design": key, "trace": trace.id, "seed": np.arange(seeds)}
                frames.append(pd.DataFrame(head | {"positions": trace.n_positions} | scores))
    return pd.concat(frames, ignore_index=True)
