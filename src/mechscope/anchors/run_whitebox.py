"""White-box steps inside a run directory: receiver heads (+ head ablation), suppression.

One shard per trace (``shards/anchors_receivers``, ``shards/anchors_suppression``) holds
the per-trace arrays and the options they were made with; a rerun reads finished traces
back and refuses shards made with other options. Tables:

- ``anchors_receiver_heads``: layer, head, mean kurtosis, receiver rank;
- ``anchors_receiver_scores``: trace, sentence, receiver score;
- ``anchors_receiver_summary``: options, head list and split-half reliability;
- ``anchors_ablation``: trace × condition (none / receivers / random sets) answers;
- ``anchors_suppression``: trace, source, target, mean log-KL and its row-centred value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from mechscope.anchors.head_ablation import ablation_study, answer_probe
from mechscope.anchors.receivers import (
    ReceiverOptions,
    ReceiverResult,
    TraceReceivers,
    analyze_receivers,
    trace_receivers,
)
from mechscope.anchors.suppression import (
    SuppressionOptions,
    SuppressionResult,
    suppression_matrix,
)
from mechscope.anchors.trace import Trace
from mechscope.anchors.trace_tokens import TraceTokens, tokenize_trace
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, write_table
from mechscope.runs.content_key import content_key

RECEIVERS_PART = "anchors_receivers"
SUPPRESSION_PART = "anchors_suppression"
HEADS_TABLE = "anchors_receiver_heads"
SCORES_TABLE = "anchors_receiver_scores"
SUMMARY_TABLE = "anchors_receiver_summary"
ABLATION_TABLE = "anchors_ablation"
SUPPRESSION_TABLE = "anchors_suppression"


def checked_tokens(lm: LoadedModel, traces: Sequence[Trace]) -> dict[str, TraceTokens]:
    """Every trace tokenised and checked against the model's context before any pass, so a
    long trace late in the input is refused at once, not after the others were analysed."""
    return {t.id: tokenize_trace(lm.tokenizer, t, max_tokens=lm.max_context) for t in traces}


def _cached(store: ShardStore, trace: Trace, options: dict[str, Any]) -> dict | None:
    """The finished shard of ``trace`` (made from the same text), or None; InputError if made
    with other options."""
    trace_id = trace.id
    if not store.done(trace_id, content_key(trace)):  # an edited trace is analysed again
        return None
    payload = store.read(trace_id)
    if payload.get("options") != options:
        raise InputError(
            f"shards made with the same options (stored {payload.get('options')}, now "
            f"{options}); use a new run directory for new options",
            sample=trace_id,
            field=store.part,
        )
    return payload


def _receiver_options_dict(opts: ReceiverOptions) -> dict[str, Any]:
    # Only what changes the per-trace arrays: head choice happens after all traces.
    return {"proximity": opts.proximity, "control_depth": opts.control_depth}


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
    store = ShardStore(run, RECEIVERS_PART)
    key = _receiver_options_dict(opts)
    tokens_of = checked_tokens(lm, traces)
    per_trace = []
    for trace in traces:
        payload = _cached(store, trace, key)
        if payload is None:
            rec = trace_receivers(eng, tokens_of[trace.id], opts)
            payload = {"options": key, "vertical": rec.vertical, "kurtosis": rec.kurtosis}
            store.write(trace.id, payload, content_key(trace))
        per_trace.append(TraceReceivers(trace.id, payload["vertical"], payload["kurtosis"]))
    result = analyze_receivers(per_trace, opts)
    write_table(run, HEADS_TABLE, result.heads_frame())
    write_table(run, SCORES_TABLE, result.scores_frame())
    write_table(run, SUMMARY_TABLE, _summary_frame(result, len(traces)))
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


def _summary_frame(result: ReceiverResult, n_traces: int) -> pd.DataFrame:
    rel = result.reliability
    row = {
        **{k: (str(v) if isinstance(v, tuple) else v) for k, v in asdict(result.options).items()},
        "n_traces": n_traces,
        "heads": " ".join(f"L{layer}H{head}" for layer, head in result.heads),
        "split_half_reliability": np.nan if rel is None else rel.reliability,
        "split_half_mean_r": np.nan if rel is None else rel.mean_r,
    }
    return pd.DataFrame([row])


def suppression_run(
    run: RunDir,
    lm: LoadedModel,
    traces: Sequence[Trace],
    options: SuppressionOptions | None = None,
) -> list[SuppressionResult]:
    """The suppression matrix of every trace (one shard per trace) and the long table."""
    opts = options or SuppressionOptions()
    eng = Engine.of(lm)
    store = ShardStore(run, SUPPRESSION_PART)
    key = {k: v for k, v in asdict(opts).items() if k != "rows_per_chunk"}
    key = {k: list(v) if isinstance(v, tuple) else v for k, v in key.items()}
    tokens_of = checked_tokens(lm, traces)
    results = []
    for trace in traces:
        payload = _cached(store, trace, key)
        if payload is None:
            res = suppression_matrix(eng, tokens_of[trace.id], opts)
            payload = {
                "options": key,
                "matrix": res.matrix,
                "normalized": res.normalized,
                "token_kl": res.token_kl,
            }
            store.write(trace.id, payload, content_key(trace))
        results.append(
            SuppressionResult(
                trace.id, payload["matrix"], payload["normalized"], payload["token_kl"], opts
            )
        )
    write_table(run, SUPPRESSION_TABLE, pd.concat([r.to_frame() for r in results]))
    return results
