"""The rollouts a run holds, read back: one shard per position (fixed design) or one per
batch of a position (adaptive design), both in ``shards/anchors_rollouts``.

A fixed position's shard is ``<trace>__p<position>``
(:func:`mechscope.anchors.resampling.rollouts.shard_id`); an adaptive batch of rollouts
``first …`` is ``<trace>__p<position>__k<first>`` (:func:`batch_id`). :func:`read_rollouts`
gives a trace's rollouts whichever design drew them.
"""

from __future__ import annotations

from mechscope.anchors.layout import ROLLOUTS_PART
from mechscope.anchors.resampling.rollouts import Rollout, TraceRollouts, shard_id
from mechscope.anchors.traces.trace import Trace
from mechscope.runs import RunDir, ShardStore


def batch_id(trace_id: str, position: int, first: int) -> str:
    """The shard of rollouts ``first …`` of ``position`` (adaptive design)."""
    return f"{shard_id(trace_id, position)}__k{first:04d}"


def read_batches(store: ShardStore, trace_id: str, position: int) -> dict[str, list] | None:
    """The rollouts of every batch of ``position`` in order (``None`` when there is none):
    ``{"resampled": [...], "forced": [...]}`` as dicts."""
    first, found = 0, None
    while store.done(batch_id(trace_id, position, first)):
        payload = store.read(batch_id(trace_id, position, first))
        found = found or {"resampled": [], "forced": []}
        found["resampled"] += payload["resampled"]
        found["forced"] += payload["forced"]
        if not payload["n"]:
            break
        first += int(payload["n"])
    return found


def read_rollouts(run: RunDir, trace: Trace) -> TraceRollouts:
    """The rollouts stored for ``trace`` (positions never sampled are absent): a position's
    shard (fixed design) or its batches in order (adaptive design)."""
    store = ShardStore(run, ROLLOUTS_PART)
    result = TraceRollouts(trace)
    for p in range(trace.n_chunks + 1):
        sid = shard_id(trace.id, p)
        payload = store.read(sid) if store.done(sid) else read_batches(store, trace.id, p)
        if payload is not None:
            result.resampled[p] = [Rollout.from_dict(d) for d in payload["resampled"]]
            result.forced[p] = [Rollout.from_dict(d) for d in payload["forced"]]
    return result
