"""Black-box importance of every chunk of a trace, from its rollouts.

Notation for chunk ``i``: ``R_i`` = rollouts that resample chunk ``i`` (chunk removed),
``K_i = R_{i+1}`` = rollouts that keep chunk ``i``; ``D_i`` / ``S_i`` = the rollouts of
``R_i`` whose first new sentence is semantically different from / similar to chunk ``i``
(cosine of all-MiniLM-L6-v2 embeddings below / at least ``similarity_threshold``).

- ``accuracy`` = acc(R_i) (as published: the accuracy *without* chunk ``i``).
- ``resampling_importance_accuracy`` = acc(K_i) − acc(R_i);
  ``resampling_importance_kl`` = KL(R_i ‖ K_i).
- ``counterfactual_importance_accuracy`` = acc(D_i) − acc(K_i) (the published sign:
  removed-and-different minus kept); ``counterfactual_importance_kl`` = KL(D_i ‖ K_i ∪ S_i)
  (``cf_reference="kept_and_similar"``, published) or KL(D_i ‖ K_i).
- ``forced_importance_accuracy`` = facc(F_{i+1}) − facc(F_i) and
  ``forced_importance_kl`` = KL(F_i ‖ F_{i+1}), with ``F_p`` the forced-answer rollouts
  at position ``p``.
- ``overdeterminedness`` = 1 − (distinct first sentences of R_i) / |R_i|.
- ``different_trajectories_fraction`` = |D_i| / |R_i|.

An undefined value (an empty set, a position that was not sampled) is NaN; the published
files write 0 there (their last chunk has all metrics 0). Rollouts without an answer are
counted per chunk (``n_no_answer``) and, by default, left out of denominators (see
:mod:`mechscope.anchors.resampling.distributions`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from mechscope.anchors.config import MetricOptions
from mechscope.anchors.resampling.distributions import accuracy, answer_kl, usable
from mechscope.anchors.resampling.embeddings import Embedder, embed_unique
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.errors import InputError


@dataclass(frozen=True)
class ChunkMetrics:
    """Every black-box metric of one chunk, with the counts behind it."""

    chunk_index: int
    accuracy: float
    resampling_importance_accuracy: float
    resampling_importance_kl: float
    counterfactual_importance_accuracy: float
    counterfactual_importance_kl: float
    forced_importance_accuracy: float
    forced_importance_kl: float
    different_trajectories_fraction: float
    overdeterminedness: float
    n_rollouts: int  # rollouts resampling this chunk (all, with or without answer)
    n_no_answer: int  # of those, how many gave no answer
    n_dissimilar: int  # |D_i| among the rollouts that enter denominators
    n_forced: int
    n_forced_no_answer: int


def overdeterminedness(sentences: Sequence[str]) -> float:
    """1 − distinct / total over resampled first sentences (NaN when there are none)."""
    if not sentences:
        return math.nan
    return 1.0 - len(set(sentences)) / len(sentences)


def dissimilar_mask(
    chunk: str, sentences: Sequence[str], vectors: Mapping[str, np.ndarray], threshold: float
) -> np.ndarray:
    """Which sentences have cosine < ``threshold`` with ``chunk`` (unit vectors). [n] bool"""
    if not sentences:
        return np.zeros(0, dtype=bool)
    base = vectors[chunk]  # [d]
    sims = np.stack([vectors[s] for s in sentences]) @ base  # [n]
    return sims < threshold


def _sub(a: float, b: float) -> float:
    """``a - b``, NaN when either is undefined."""
    return math.nan if math.isnan(a) or math.isnan(b) else a - b


def _one_chunk(
    i: int,
    chunk: str,
    removed: Sequence[Rollout],
    kept: Sequence[Rollout] | None,
    forced_here: Sequence[Rollout] | None,
    forced_next: Sequence[Rollout] | None,
    vectors: Mapping[str, np.ndarray] | None,
    opts: MetricOptions,
) -> ChunkMetrics:
    nan = math.nan
    r_use = usable(removed, opts.count_no_answer)
    acc = accuracy(removed, count_no_answer=opts.count_no_answer)
    acc_kept = nan if kept is None else accuracy(kept, count_no_answer=opts.count_no_answer)
    ri_kl = nan if kept is None else answer_kl(removed, kept, opts.kl)

    dt = od = cf_acc = cf_kl = nan
    n_dis = 0
    if vectors is not None and r_use:
        mask = dissimilar_mask(
            chunk, [r.first_sentence for r in r_use], vectors, opts.similarity_threshold
        )
        dis = [r for r, m in zip(r_use, mask, strict=True) if m]
        sim = [r for r, m in zip(r_use, mask, strict=True) if not m]
        n_dis, dt = len(dis), len(dis) / len(r_use)
        if kept is not None and dis:
            cf_acc = _sub(accuracy(dis, count_no_answer=opts.count_no_answer), acc_kept)
            reference = [*kept, *sim] if opts.cf_reference == "kept_and_similar" else list(kept)
            cf_kl = answer_kl(dis, reference, opts.kl)
    if r_use:
        od = overdeterminedness([r.first_sentence for r in r_use])

    fi_acc = fi_kl = nan
    if forced_here is not None and forced_next is not None:
        fi_acc = _sub(
            accuracy(forced_next, count_no_answer=opts.count_no_answer),
            accuracy(forced_here, count_no_answer=opts.count_no_answer),
        )
        fi_kl = answer_kl(forced_here, forced_next, opts.kl)
    return ChunkMetrics(
        chunk_index=i,
        accuracy=acc,
        resampling_importance_accuracy=_sub(acc_kept, acc),
        resampling_importance_kl=ri_kl,
        counterfactual_importance_accuracy=cf_acc,
        counterfactual_importance_kl=cf_kl,
        forced_importance_accuracy=fi_acc,
        forced_importance_kl=fi_kl,
        different_trajectories_fraction=dt,
        overdeterminedness=od,
        n_rollouts=len(removed),
        n_no_answer=sum(not r.has_answer for r in removed),
        n_dissimilar=n_dis,
        n_forced=len(forced_here or []),
        n_forced_no_answer=sum(not r.has_answer for r in forced_here or []),
    )


def chunk_metrics(
    chunks: Sequence[str],
    resampled: Mapping[int, Sequence[Rollout]],
    forced: Mapping[int, Sequence[Rollout]] | None = None,
    *,
    embedder: Embedder | None = None,
    options: MetricOptions | None = None,
) -> list[ChunkMetrics]:
    """Metrics of every chunk; ``resampled[p]`` / ``forced[p]`` are rollouts from position p.

    Without an ``embedder`` the semantic metrics (counterfactual importance, different
    trajectories) are NaN; overdeterminedness needs none.
    """
    opts = options or MetricOptions()
    if not chunks:
        raise InputError("at least one chunk", field="chunks")
    missing = [p for p in range(len(chunks)) if p not in resampled]
    if len(missing) == len(chunks):
        raise InputError("rollouts for at least one chunk position", field="resampled")
    forced = forced or {}
    vectors = None
    if embedder is not None:
        texts = list(chunks) + [r.first_sentence for rs in resampled.values() for r in rs]
        vectors = embed_unique(embedder, texts)
    out = []
    for i, chunk in enumerate(chunks):
        out.append(
            _one_chunk(
                i,
                chunk,
                resampled.get(i, []),
                resampled.get(i + 1),
                forced.get(i),
                forced.get(i + 1),
                vectors,
                opts,
            )
        )
    return out


def metrics_frame(metrics: Sequence[ChunkMetrics]) -> pd.DataFrame:
    """One row per chunk, one column per metric and count."""
    return pd.DataFrame([asdict(m) for m in metrics])
