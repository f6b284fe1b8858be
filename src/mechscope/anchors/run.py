"""The anchors steps inside a run directory: what the ``mechscope anchors`` commands run.

Black box (no model internals): :func:`base_traces` (a greedy trace per problem),
:func:`resample_run` (rollouts from every chunk boundary, ``anchors resample``) and
:func:`analyze_run` (chunk metrics and the resampling sentence matrices,
``anchors analyze``, a :class:`~mechscope.anchors.result.ResamplingResult`). White box:
:func:`receivers_run` (receiver heads and head ablation, ``anchors receivers``, a
:class:`~mechscope.anchors.result.ReceiverResult`) and :func:`suppression_run` (attention
suppression, ``anchors suppress``, one :class:`~mechscope.anchors.result.SuppressionResult`
per trace); :func:`priors_run` (the adaptive design's white-box priors, after the step they
read).

Everything is resumable. Base traces are one shard per problem (``shards/anchors_base``),
rollouts one shard per (trace, position) (``shards/anchors_rollouts``, see
:mod:`mechscope.anchors.resampling.rollouts`; workers sharing the run claim positions),
receivers and suppression one shard per trace
(:mod:`mechscope.anchors.attention.trace_shards`). The tables and arrays are named in
:mod:`mechscope.anchors.layout`:

- ``anchors_traces`` / ``anchors_sentences``: the run's traces and their labelled
  sentences (:mod:`mechscope.anchors.traces.saved`);
- ``anchors_chunks``: one row per analysed chunk (text, category, every metric and the
  counts behind it, rollouts without an answer included), plus the resampling sentence →
  sentence matrices in ``arrays/anchors_resampling_matrix.npz`` (one per trace);
- ``anchors_receiver_heads``: layer, head, mean kurtosis, receiver rank;
- ``anchors_receiver_scores``: trace, sentence, receiver score;
- ``anchors_receiver_summary``: options, head list and split-half reliability;
- ``anchors_ablation``: trace × condition (none / receivers / random sets) answers;
- ``anchors_suppression``: trace, source, target, mean log-KL and its row-centred value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.priors import PRIOR_TABLES, position_priors
from mechscope.anchors.attention.head_ablation import ablation_study, answer_probe
from mechscope.anchors.attention.receivers import TraceReceivers, analyze_receivers, trace_receivers
from mechscope.anchors.attention.suppression import suppression_matrix
from mechscope.anchors.attention.trace_shards import (
    checked_tokens,
    receiver_key,
    suppression_key,
    trace_payloads,
)
from mechscope.anchors.config import (
    MetricOptions,
    ReceiverOptions,
    RolloutSettings,
    SuppressionOptions,
)
from mechscope.anchors.layout import (
    ABLATION_TABLE,
    BACKEND_TABLE,
    BASE_PART,
    CHUNKS_TABLE,
    HEADS_TABLE,
    RECEIVERS_PART,
    RESAMPLING_MATRIX,
    ROLLOUTS_PART,
    SCORES_TABLE,
    SUMMARY_TABLE,
    SUPPRESSION_PART,
    SUPPRESSION_TABLE,
)
from mechscope.anchors.resampling.chunk_table import trace_chunks
from mechscope.anchors.resampling.embeddings import Embedder
from mechscope.anchors.resampling.rollouts import TraceRollouts, positions, resample_trace
from mechscope.anchors.resampling.sampler import Sampler
from mechscope.anchors.resampling.sentence_matrix import sentence_matrix
from mechscope.anchors.resampling.stored import check_design, read_rollouts, require_rollouts
from mechscope.anchors.result import ReceiverResult, ResamplingResult, SuppressionResult
from mechscope.anchors.samples import generate_traces
from mechscope.anchors.traces.taxonomy import Labeler, RuleLabeler
from mechscope.anchors.traces.trace import Trace
from mechscope.data.math import MathProblem
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.progress import track
from mechscope.runs import RunDir, ShardStore, has_table, read_table, write_arrays, write_table
from mechscope.runs.executor import is_worker, shared_work_done


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
    check_design(run, traces, False, max_chunks)
    store = ShardStore(run, ROLLOUTS_PART)
    rollouts = {
        t.id: resample_trace(
            t, sampler, store, settings=settings, positions=positions(t, max_chunks), shared=True
        )
        for t in track(traces, "anchors: resampling")
    }
    shared_work_done()  # a worker ends here
    return rollouts


def record_backend(run: RunDir, description: dict[str, Any]) -> None:
    """Add what samples this command's rollouts (``sampler.describe()``: the engine's model,
    or a server's URL, model id and version) to the run's ``anchors_backend`` table, one row
    per command, with the time it started. An executor's worker adds none: it samples with
    the backend of the command that started it, which records it once."""
    import json
    import time

    if is_worker():
        return

    row = {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in description.items()}
    row = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row}
    table = pd.DataFrame([row])
    if has_table(run, BACKEND_TABLE):
        table = pd.concat([read_table(run, BACKEND_TABLE), table], ignore_index=True)
    write_table(run, BACKEND_TABLE, table)


def analyze_run(
    run: RunDir,
    traces: Sequence[Trace],
    *,
    embedder: Embedder | None = None,
    options: MetricOptions | None = None,
    labeler: Labeler | None = None,
) -> ResamplingResult:
    """Chunk metrics and labels of every trace with rollouts (``anchors_chunks``), and the
    resampling sentence matrices (with an ``embedder`` only)."""
    require_rollouts(run)
    opts, labeler = options or MetricOptions(), labeler or RuleLabeler()
    frames, matrices = [], {}
    for trace in track(traces, "anchors: analysis"):
        rollouts = read_rollouts(run, trace)
        if not rollouts.resampled:
            continue
        frames.append(trace_chunks(trace, rollouts, labeler, embedder, opts))
        if embedder is not None:
            matrices[trace.id] = sentence_matrix(trace.chunk_texts, rollouts.resampled, embedder)
    if not frames:
        raise InputError(f"rollouts in {run.path} (run 'mechscope anchors resample' first)")
    table = pd.concat(frames, ignore_index=True)
    write_table(run, CHUNKS_TABLE, table)
    if matrices:
        write_arrays(run, RESAMPLING_MATRIX, matrices)
    return ResamplingResult(table, matrices)


def receivers_run(
    run: RunDir,
    lm: LoadedModel,
    traces: Sequence[Trace],
    options: ReceiverOptions | None = None,
    *,
    ablate: bool = True,
    n_random: int = 10,
) -> ReceiverResult:
    """Per-trace vertical scores (resumable), receiver heads, scores and head ablation."""
    opts = options or ReceiverOptions()
    eng = Engine.of(lm)
    tokens_of = checked_tokens(lm, traces)

    def compute(trace: Trace) -> dict[str, Any]:
        rec = trace_receivers(eng, tokens_of[trace.id], opts)
        return {"vertical": rec.vertical, "kurtosis": rec.kurtosis}

    payloads = trace_payloads(ShardStore(run, RECEIVERS_PART), traces, receiver_key(opts), compute)
    per_trace = [
        TraceReceivers(t.id, p["vertical"], p["kurtosis"])
        for t, p in zip(traces, payloads, strict=True)
    ]
    result = analyze_receivers(per_trace, opts)
    if not result.heads:  # nothing to score or ablate: say why instead of empty tables
        raise InputError(
            "no receiver head: every head's vertical-score kurtosis is undefined (traces "
            f"need sentences more than proximity {opts.proximity} apart) or every layer is "
            "excluded",
            field="receivers",
        )
    write_table(run, HEADS_TABLE, result.heads_frame())
    write_table(run, SCORES_TABLE, result.scores_frame())
    write_table(run, SUMMARY_TABLE, result.summary_frame(len(traces)))
    if ablate:
        probes = [answer_probe(lm.tokenizer, t) for t in traces]
        table = ablation_study(
            eng,
            probes,
            result.heads,
            n_random=n_random,
            exclude_layers=opts.exclude_layers,
            seed=opts.seed,
        )
        write_table(run, ABLATION_TABLE, table)
    return result


def suppression_run(
    run: RunDir,
    lm: LoadedModel,
    traces: Sequence[Trace],
    options: SuppressionOptions | None = None,
) -> list[SuppressionResult]:
    """The suppression matrix of every trace (one shard per trace) and the long table."""
    opts = options or SuppressionOptions()
    eng = Engine.of(lm)
    tokens_of = checked_tokens(lm, traces)

    def compute(trace: Trace) -> dict[str, Any]:
        res = suppression_matrix(eng, tokens_of[trace.id], opts)
        return {"matrix": res.matrix, "normalized": res.normalized, "token_kl": res.token_kl}

    payloads = trace_payloads(
        ShardStore(run, SUPPRESSION_PART), traces, suppression_key(opts), compute
    )
    results = [
        SuppressionResult(t.id, p["matrix"], p["normalized"], p["token_kl"], opts)
        for t, p in zip(traces, payloads, strict=True)
    ]
    write_table(run, SUPPRESSION_TABLE, pd.concat([r.to_frame() for r in results]))
    return results


def priors_run(
    run: RunDir, lm: LoadedModel, traces: Sequence[Trace], kind: str, max_chunks: int | None
) -> dict[str, np.ndarray]:
    """The adaptive design's white-box priors (``kind``: receivers or suppression, see
    :mod:`mechscope.anchors.adaptive.priors`), after the step they read when the run lacks its table
    (receivers without head ablation)."""
    if not has_table(run, PRIOR_TABLES[kind]):
        if kind == "receivers":
            receivers_run(run, lm, traces, ablate=False)
        else:
            suppression_run(run, lm, traces)
    return position_priors(run, traces, kind, max_chunks)
