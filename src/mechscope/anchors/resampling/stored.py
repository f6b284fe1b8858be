"""The rollouts a run holds, read back: one shard per position (fixed design) or one per
batch of a position (adaptive design), both in ``shards/anchors_rollouts``.

A fixed position's shard is ``<trace>__p<position>``
(:func:`mechscope.anchors.resampling.rollouts.shard_id`); an adaptive batch of rollouts
``first …`` is ``<trace>__p<position>__k<first>`` (:func:`batch_id`). :func:`read_rollouts`
gives a trace's rollouts whichever design drew them. A run holds one design only:
:func:`check_design` refuses the other before a command records anything, and
:func:`require_rollouts` a run with none before a step creates anything in it.
"""

from __future__ import annotations

from collections.abc import Sequence

from mechscope.anchors.layout import ROLLOUTS_PART
from mechscope.anchors.resampling.rollouts import Rollout, TraceRollouts, positions, shard_id
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError
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


def _rollouts_dir(run: RunDir):
    return run.path / "shards" / ROLLOUTS_PART


def check_design(
    run: RunDir, traces: Sequence[Trace], adaptive: bool, max_chunks: int | None
) -> None:
    """Refuse in one line rollouts of the other design in ``run`` (fixed shards for an
    adaptive command, adaptive batches for a fixed one), before the command records its
    backend or writes anything. Creates nothing."""
    if not _rollouts_dir(run).is_dir():
        return
    store = ShardStore(run, ROLLOUTS_PART)
    for t in traces:
        for p in positions(t, max_chunks):
            other = shard_id(t.id, p) if adaptive else batch_id(t.id, p, 0)
            if not store.done(other):
                continue
            if adaptive:
                what = (
                    "a run directory without fixed-design rollouts (this one was resampled "
                    "with --n per position; use a new run directory for --adaptive)"
                )
            else:
                what = (
                    "a run directory without adaptive rollouts (this one was resampled with "
                    "--adaptive; use a new run directory for the fixed design)"
                )
            raise InputError(what, sample=other, field="--adaptive")


def require_rollouts(run: RunDir) -> None:
    """Refuse a run without rollouts in one line, creating nothing (no shard folder, no
    manifest change): ``anchors analyze`` before ``anchors resample``."""
    folder = _rollouts_dir(run)
    if not folder.is_dir() or not any(folder.glob("*.json")):
        raise InputError(
            f"rollouts in {run.path} (run 'mechscope anchors resample' first)", field="--out"
        )
