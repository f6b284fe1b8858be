"""Sentence → sentence importance: does keeping sentence i make sentence j come back?

For a later sentence ``j > i``, a rollout *contains* ``j`` when one of its chunks has
cosine ≥ ``threshold`` with sentence ``j``. Then

    M[i, j] = rate(j in rollouts that keep i) − rate(j in rollouts that resample i),

with "keep i" = rollouts from position ``i + 1`` and "resample i" = rollouts from
position ``i``. Positive: sentence ``i`` leads to sentence ``j``. Entries with ``j <= i``,
or whose positions were not sampled, are NaN. Every rollout counts here, with or without
an answer: the question is about the text, not the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mechscope.anchors.config import DEFAULT_THRESHOLD
from mechscope.anchors.resampling.embeddings import Embedder, embed_unique
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.anchors.traces.chunking import split_into_chunks
from mechscope.errors import InputError


def presence(
    rollout_chunks: Sequence[Sequence[str]],
    sentence_vectors: np.ndarray,
    vectors: Mapping[str, np.ndarray],
    threshold: float,
) -> np.ndarray:
    """Whether each rollout contains each sentence. → [n_rollouts, n_sentences] bool"""
    out = np.zeros((len(rollout_chunks), sentence_vectors.shape[0]), dtype=bool)
    for r, texts in enumerate(rollout_chunks):
        if texts:
            sims = np.stack([vectors[t] for t in texts]) @ sentence_vectors.T  # [c, n]
            out[r] = sims.max(axis=0) >= threshold
    return out


def sentence_matrix(
    chunks: Sequence[str],
    resampled: Mapping[int, Sequence[Rollout]],
    embedder: Embedder,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> np.ndarray:
    """``M[i, j]`` as in the module docstring. → [n_chunks, n_chunks] float64"""
    n = len(chunks)
    if n == 0:
        raise InputError("at least one chunk", field="chunks")
    per_position = {
        p: [[c.text for c in split_into_chunks(r.text)] for r in rs]
        for p, rs in resampled.items()
        if rs
    }
    all_texts = list(chunks) + [t for rows in per_position.values() for row in rows for t in row]
    vectors = embed_unique(embedder, all_texts)
    sentence_vectors = np.stack([vectors[c] for c in chunks])  # [n, d]
    rate = {
        p: presence(rows, sentence_vectors, vectors, threshold).mean(axis=0)  # [n]
        for p, rows in per_position.items()
    }
    out = np.full((n, n), np.nan)
    for i in range(n):
        if i in rate and i + 1 in rate:
            out[i, i + 1 :] = rate[i + 1][i + 1 :] - rate[i][i + 1 :]
    return out
