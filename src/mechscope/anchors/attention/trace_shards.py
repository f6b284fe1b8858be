"""The per-trace shards of the white-box steps: checked before any pass, reused after.

Receivers and suppression write one shard per trace with the options it was made with and
a key of the trace's content: a rerun reads a finished trace back, analyses an edited trace
again, and refuses a shard made with other options (a new run directory is the place for
new options). Every trace is tokenised and checked against the model's context first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from mechscope.anchors.attention.trace_tokens import TraceTokens, tokenize_trace
from mechscope.anchors.config import ReceiverOptions, SuppressionOptions
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs import ShardStore
from mechscope.runs.content_key import content_key


def checked_tokens(lm: LoadedModel, traces: Sequence[Trace]) -> dict[str, TraceTokens]:
    """Every trace tokenised and checked against the model's context before any pass, so a
    long trace late in the input is refused at once, not after the others were analysed."""
    return {t.id: tokenize_trace(lm.tokenizer, t, max_tokens=lm.max_context) for t in traces}


def cached(store: ShardStore, trace: Trace, options: dict[str, Any]) -> dict | None:
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


def trace_payloads(
    store: ShardStore,
    traces: Sequence[Trace],
    options: dict[str, Any],
    compute: Callable[[Trace], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Every trace's payload, in order: its finished shard (:func:`cached`), or else
    ``compute(trace)`` written as its shard with ``options`` and the trace's content key."""
    payloads = []
    for trace in traces:
        payload = cached(store, trace, options)
        if payload is None:
            payload = {"options": options, **compute(trace)}
            store.write(trace.id, payload, content_key(trace))
        payloads.append(payload)
    return payloads


def receiver_key(opts: ReceiverOptions) -> dict[str, Any]:
    """The options a receivers shard is made with."""
    # Only what changes the per-trace arrays: head choice happens after all traces.
    return {"proximity": opts.proximity, "control_depth": opts.control_depth}


def suppression_key(opts: SuppressionOptions) -> dict[str, Any]:
    """The options a suppression shard is made with (all but the batching), as JSON."""
    key = {k: v for k, v in asdict(opts).items() if k != "rows_per_chunk"}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in key.items()}
