"""Black-box steps inside a run directory: base traces, rollouts, chunk metrics.

Everything is resumable: base traces are one shard per problem (``shards/anchors_base``),
rollouts one shard per (trace, position) (``shards/anchors_rollouts``, see
:mod:`mechscope.anchors.rollouts`). Results are tables: ``anchors_traces`` (one row per
trace) and ``anchors_chunks`` (one row per analysed chunk: text, category, every metric
and the counts behind it, rollouts without an answer included), plus the resampling
sentence → sentence matrices in ``arrays/anchors_resampling_matrix.npz`` (one per trace).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.anchors.embeddings import Embedder
from mechscope.anchors.metrics import MetricOptions, chunk_metrics, metrics_frame
from mechscope.anchors.problems import generate_traces
from mechscope.anchors.rollouts import (
    Rollout,
    RolloutSettings,
    TraceRollouts,
    resample_trace,
    shard_id,
)
from mechscope.anchors.sampler import Sampler
from mechscope.anchors.sentence_matrix import sentence_matrix
from mechscope.anchors.taxonomy import Labeler, RuleLabeler
from mechscope.anchors.trace import Trace
from mechscope.data.math import MathProblem
from mechscope.errors import InputError
from mechscope.progress import track
from mechscope.runs import RunDir, ShardStore, has_table, read_table, write_arrays, write_table
from mechscope.runs.claims import Claims

TRACES_TABLE = "anchors_traces"
SENTENCES_TABLE = "anchors_sentences"
CHUNKS_TABLE = "anchors_chunks"
RESAMPLING_MATRIX = "anchors_resampling_matrix"
BASE_PART = "anchors_base"
ROLLOUTS_PART = "anchors_rollouts"


def base_traces(
    run: RunDir, sampler: Sampler, tokenizer, problems: Sequence[MathProblem], max_new_tokens: int
) -> list[Trace]:
    """Greedy reasoning trace of every problem, one shard each (reused on a rerun).

    The problems still to do go to ``sampler`` in one call (an :class:`EngineSampler` decodes
    them together); each trace is written as its own shard.
    """
    store = ShardStore(run, BASE_PART)
    todo = [p for p in problems if not store.done(p.id)]
    if todo:
        for trace in generate_traces(sampler, tokenizer, todo, max_new_tokens=max_new_tokens):
            store.write(trace.id, {"text": trace.text, "gold": trace.gold})
    out = []
    for problem in problems:
        payload = store.read(problem.id)
        out.append(Trace.from_text(problem.id, payload["text"], payload["gold"]))
    return out


def save_traces(run: RunDir, traces: Sequence[Trace], labeler: Labeler | None = None) -> None:
    """The traces of this run (``anchors_traces``), so later steps need no input file, and
    their sentences with a category each (``anchors_sentences``, rule-based by default)."""
    if not traces:
        raise InputError("at least one trace", field="traces")
    rows = [{"trace": t.id, "text": t.text, "gold": t.gold, "n_chunks": t.n_chunks} for t in traces]
    write_table(run, TRACES_TABLE, pd.DataFrame(rows))
    write_table(run, SENTENCES_TABLE, sentences_frame(traces, labeler or RuleLabeler()))


def sentences_frame(traces: Sequence[Trace], labeler: Labeler) -> pd.DataFrame:
    """One row per sentence: trace, index, text, category (first tag), dependencies."""
    rows = []
    for t in traces:
        for i, (text, lab) in enumerate(
            zip(t.chunk_texts, labeler.label(t.chunk_texts, ""), strict=True)
        ):
            rows.append(
                {
                    "trace": t.id,
                    "sentence": i,
                    "text": text,
                    "category": lab.tags[0],
                    "depends_on": ",".join(map(str, lab.depends_on)),
                }
            )
    return pd.DataFrame(rows)


def load_traces(run: RunDir) -> list[Trace]:
    """The traces saved by :func:`save_traces` (InputError if there are none)."""
    if not has_table(run, TRACES_TABLE):
        raise InputError(
            f"traces in {run.path} (run 'mechscope anchors resample' first, or pass INPUT)",
            field="run",
        )
    frame = read_table(run, TRACES_TABLE)
    return [Trace.from_text(r.trace, r.text, r.gold) for r in frame.itertuples()]


def positions(trace: Trace, max_chunks: int | None) -> range:
    """Positions to resample so that chunks ``0 … m-1`` get both their rollout sets."""
    m = trace.n_chunks if max_chunks is None else min(trace.n_chunks, max_chunks)
    return range(m + 1)


def resample_run(
    run: RunDir,
    sampler: Sampler,
    traces: Sequence[Trace],
    settings: RolloutSettings,
    *,
    max_chunks: int | None = None,
) -> dict[str, TraceRollouts]:
    """Rollouts of every trace (finished positions are read back, not resampled). Several
    workers can share ``run``: each position is claimed and sampled by one of them."""
    store = ShardStore(run, ROLLOUTS_PART)
    claims = Claims(store)
    return {
        t.id: resample_trace(
            t,
            sampler,
            store,
            settings=settings,
            positions=positions(t, max_chunks),
            claims=claims,
        )
        for t in track(traces, "anchors: resampling")
    }


def read_rollouts(run: RunDir, trace: Trace) -> TraceRollouts:
    """The rollouts stored for ``trace`` (positions never sampled are absent)."""
    store = ShardStore(run, ROLLOUTS_PART)
    result = TraceRollouts(trace)
    for p in range(trace.n_chunks + 1):
        sid = shard_id(trace.id, p)
        if store.done(sid):
            payload = store.read(sid)
            result.resampled[p] = [Rollout.from_dict(d) for d in payload["resampled"]]
            result.forced[p] = [Rollout.from_dict(d) for d in payload["forced"]]
    return result


def _trace_frame(
    trace: Trace,
    rollouts: TraceRollouts,
    labeler: Labeler,
    embedder: Embedder | None,
    options: MetricOptions,
) -> pd.DataFrame:
    texts = trace.chunk_texts
    metrics = chunk_metrics(
        texts, rollouts.resampled, rollouts.forced or None, embedder=embedder, options=options
    )
    labels = labeler.label(texts, "")
    frame = metrics_frame(metrics)
    frame.insert(0, "trace", trace.id)
    frame.insert(2, "text", texts)
    frame.insert(3, "category", [lab.tags[0] for lab in labels])
    frame.insert(4, "depends_on", [",".join(map(str, lab.depends_on)) for lab in labels])
    frame.insert(5, "position", np.arange(len(texts)) / max(1, len(texts) - 1))
    both = [i in rollouts.resampled and i + 1 in rollouts.resampled for i in range(len(texts))]
    return frame[both].reset_index(drop=True)  # chunks with a removed and a kept set


def analyze_run(
    run: RunDir,
    traces: Sequence[Trace],
    *,
    embedder: Embedder | None = None,
    options: MetricOptions | None = None,
    labeler: Labeler | None = None,
) -> pd.DataFrame:
    """Chunk metrics and labels of every trace with rollouts (``anchors_chunks``)."""
    opts, labeler = options or MetricOptions(), labeler or RuleLabeler()
    frames, matrices = [], {}
    for trace in track(traces, "anchors: analysis"):
        rollouts = read_rollouts(run, trace)
        if not rollouts.resampled:
            continue
        frames.append(_trace_frame(trace, rollouts, labeler, embedder, opts))
        if embedder is not None:
            matrices[trace.id] = sentence_matrix(trace.chunk_texts, rollouts.resampled, embedder)
    if not frames:
        raise InputError(f"rollouts in {run.path} (run 'mechscope anchors resample' first)")
    table = pd.concat(frames, ignore_index=True)
    write_table(run, CHUNKS_TABLE, table)
    if matrices:
        write_arrays(run, RESAMPLING_MATRIX, matrices)
    return table
