"""White-box priors for the adaptive design: a cheap score per chunk, computed first, that
orders positions the stopping rule finds equally uncertain (:mod:`mechscope.anchors.adaptive.rule`).

- ``receivers``: the chunk's receiver score (mean attention it gets from much later
  sentences in the receiver heads, ``anchors receivers``);
- ``suppression``: the chunk's mean row-centred suppression effect on the later sentences
  (``anchors suppress``: how much hiding it changes them, against their average source).

Each is read from the step's table in the run (:func:`mechscope.anchors.run.priors_run` runs
the step first when the run lacks it: receivers without head ablation). Position ``p``
enters chunks ``p - 1`` and ``p``; its prior is the larger of their scores (NaN chunks are
ignored; a position with none gets NaN, ordered last).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.anchors.layout import SCORES_TABLE, SUPPRESSION_TABLE
from mechscope.anchors.resampling.rollouts import positions
from mechscope.anchors.traces.trace import Trace
from mechscope.runs import RunDir, read_table

#: The table each kind of prior is read from.
PRIOR_TABLES = {"receivers": SCORES_TABLE, "suppression": SUPPRESSION_TABLE}


def chunk_scores(run: RunDir, traces: Sequence[Trace], kind: str) -> dict[str, np.ndarray]:
    """Per trace, the ``kind`` score of every chunk ``[n_chunks]`` (NaN where undefined), from
    the step's table in ``run``."""
    if kind == "receivers":
        table, col, key = read_table(run, SCORES_TABLE), "receiver_score", "sentence"
    else:
        supp = read_table(run, SUPPRESSION_TABLE)
        table = supp.groupby(["trace", "source"], as_index=False)["normalized"].mean()
        col, key = "normalized", "source"
    return {t.id: _by_chunk(table[table["trace"] == t.id], key, col, t.n_chunks) for t in traces}


def _by_chunk(part: pd.DataFrame, key: str, col: str, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    idx = part[key].to_numpy(int)
    keep = (idx >= 0) & (idx < n)
    out[idx[keep]] = part[col].to_numpy(float)[keep]
    return out


def to_positions(scores: np.ndarray, n_positions: int) -> np.ndarray:
    """A position's prior from its chunks' scores: ``max(score[p - 1], score[p])``. [P]"""
    padded = np.full(n_positions + 1, np.nan)
    m = min(scores.size, n_positions)
    padded[1 : m + 1] = scores[:m]  # padded[p + 1] = score of chunk p
    pair = np.stack([padded[:-1], padded[1:]])  # [2, P]: chunks p - 1 and p
    best = np.max(np.nan_to_num(pair, nan=-np.inf), axis=0)
    return np.where(np.isnan(pair).all(axis=0), np.nan, best)


def position_priors(
    run: RunDir, traces: Sequence[Trace], kind: str, max_chunks: int | None = None
) -> dict[str, np.ndarray]:
    """Per trace, the prior of every resampled position (see the module docstring)."""
    scores = chunk_scores(run, traces, kind)
    return {t.id: to_positions(scores[t.id], len(positions(t, max_chunks))) for t in traces}
