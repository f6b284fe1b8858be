"""Adaptive resampling inside a run directory (``anchors resample --adaptive``).

Rounds follow the rule of :mod:`mechscope.anchors.adaptive.rule` over all traces at once: round 0
draws ``n_min`` rollouts at every position, each later round the rollouts the rule asks for.
A round's draws are *batches*, one shard each (``<trace>__p<position>__k<first>`` in
``shards/anchors_rollouts``): rollouts ``first … first + n - 1`` of the position's seed,
the same rollouts the fixed design draws first there
(:func:`~mechscope.anchors.resampling.rollouts.position_seed`,
:func:`~mechscope.anchors.resampling.sampler.rollout_seed`), and the position's forced
answers with its first batch. The next round is decided from the batches recorded so far
only, so a killed run, resumed, reads the finished batches back, takes the same decisions
and draws the same rollouts; workers sharing the run claim batches
(:func:`mechscope.runs.shared_work.claimed_groups`) and each decide the same rounds.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mechscope.anchors.adaptive.result import AdaptiveResult, trace_frame
from mechscope.anchors.adaptive.rule import decide
from mechscope.anchors.adaptive.state import TraceState
from mechscope.anchors.config import AdaptiveSettings, RolloutSettings
from mechscope.anchors.layout import ADAPTIVE_TABLE, ADAPTIVE_TRACES_TABLE, ROLLOUTS_PART
from mechscope.anchors.resampling.rollouts import (
    Rollout,
    make_rollout,
    position_seed,
    positions,
    shard_id,
)
from mechscope.anchors.resampling.sampler import RolloutRequest, Sampler, sample_requests
from mechscope.anchors.resampling.stored import batch_id
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError
from mechscope.progress import progress_enabled
from mechscope.runs import RunDir, ShardStore, write_table
from mechscope.runs.executor import shared_work_done
from mechscope.runs.shared_work import claimed_groups


@dataclass(frozen=True)
class Batch:
    """Rollouts ``first … first + n - 1`` of one position, drawn in round ``round``."""

    trace: Trace
    position: int
    first: int
    n: int
    round: int

    @property
    def id(self) -> str:
        return batch_id(self.trace.id, self.position, self.first)


def _payload(batch: Batch, sampled: list[str], forced: list[str], settings, adaptive) -> dict:
    t, p = batch.trace, batch.position
    return {
        "trace_id": t.id,
        "position": p,
        "first": batch.first,
        "n": batch.n,
        "round": batch.round,
        "prefix_chars": len(t.prefix(p)),
        "settings": asdict(settings),
        "adaptive": asdict(adaptive),
        "resampled": [make_rollout(x, t.gold, p).to_dict() for x in sampled],
        "forced": [make_rollout(x, t.gold, p, forced=True).to_dict() for x in forced],
    }


def _checked(store: ShardStore, batch: Batch, settings, adaptive) -> dict[str, Any]:
    payload = store.read(batch.id)
    expected = {
        "position": batch.position,
        "first": batch.first,
        "n": batch.n,
        "prefix_chars": len(batch.trace.prefix(batch.position)),
        "settings": asdict(settings),
        "adaptive": asdict(adaptive),
    }
    # a batch stored before a rule option existed was made with its default
    stored = payload.get("adaptive")
    if isinstance(stored, dict):
        payload = payload | {"adaptive": asdict(AdaptiveSettings()) | stored}
    for key, value in expected.items():
        if payload.get(key) != value:
            raise InputError(
                f"a stored batch made with {key}={value!r}, found {payload.get(key)!r} "
                "(use a new run directory for new settings)",
                sample=batch.id,
                field=key,
            )
    return payload


def _sample(sampler: Sampler, requests, settings: RolloutSettings, max_new_tokens: int):
    return sample_requests(
        sampler,
        requests,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=max_new_tokens,
    )


def _draw(
    sampler: Sampler,
    group: list[Batch],
    store: ShardStore,
    settings: RolloutSettings,
    adaptive: AdaptiveSettings,
) -> None:
    """Sample a group of batches together (free rollouts, then forced answers of first
    batches) and write each batch's shard."""
    seed = settings.seed
    free = [
        RolloutRequest(
            b.trace.prefix(b.position), position_seed(seed, b.position, "free"), b.n, b.first
        )
        for b in group
    ]
    texts = _sample(sampler, free, settings, settings.max_new_tokens)
    starts = [b for b in group if b.first == 0 and settings.n_forced > 0]
    forced_requests = [
        RolloutRequest(
            b.trace.forced_prompt(b.position),
            position_seed(settings.seed, b.position, "forced"),
            settings.n_forced,
        )
        for b in starts
    ]
    forced_texts = _sample(sampler, forced_requests, settings, settings.forced_max_new_tokens)
    forced_of = {b.id: f for b, f in zip(starts, forced_texts, strict=True)}
    for b, sampled in zip(group, texts, strict=True):
        store.write(b.id, _payload(b, sampled, forced_of.get(b.id, []), settings, adaptive))


def _refuse_fixed_shards(store: ShardStore, state: TraceState) -> None:
    for p in range(state.n_positions):
        if store.done(shard_id(state.trace.id, p)):
            raise InputError(
                "a run directory without fixed-design rollouts (this one was resampled with "
                "--n per position; use a new run directory for --adaptive)",
                sample=shard_id(state.trace.id, p),
                field="--adaptive",
            )


def adaptive_resample_run(
    run: RunDir,
    sampler: Sampler,
    traces: Sequence[Trace],
    settings: RolloutSettings,
    adaptive: AdaptiveSettings,
    *,
    max_chunks: int | None = None,
    priors: Mapping[str, np.ndarray] | None = None,
    batch_rollouts: int = 64,
) -> AdaptiveResult:
    """Adaptive rollouts of every trace (``settings.n`` is the fixed design's rollouts per
    position, the cap unless ``adaptive.cap``), resumable;
    ``priors``: per trace, a score per position (higher first among equally wide ones);
    ``batch_rollouts``: rollouts sampled together in one call (several positions)."""
    adaptive.check_against(settings.n)
    store = ShardStore(run, ROLLOUTS_PART)
    states = []
    for t in traces:
        n_pos = len(positions(t, max_chunks))
        prior = None if priors is None else priors.get(t.id)
        states.append(TraceState(t, n_pos, prior))
        _refuse_fixed_shards(store, states[-1])
    round_no = 0
    while True:
        todo: list[Batch] = []
        for st in states:
            d = decide(st.drawn, st.usable, st.correct, settings.n, adaptive, st.prior)
            firsts = st.drawn
            todo += [
                Batch(st.trace, int(p), int(firsts[p]), int(d.add[p]), round_no)
                for p in np.flatnonzero(d.add)
            ]
        if not todo:
            break
        if progress_enabled():
            drawing = sum(b.n for b in todo)
            print(
                f"anchors adaptive: round {round_no}: {drawing} rollouts at {len(todo)} positions",
                file=sys.stderr,
                flush=True,
            )
        claimed_groups(
            store,
            todo,
            lambda b: b.id,
            lambda b: store.done(b.id),
            lambda group: _draw(sampler, group, store, settings, adaptive),
            size=lambda b: b.n,
            limit=batch_rollouts,
        )
        by_trace = {st.trace.id: st for st in states}
        for b in todo:
            payload = _checked(store, b, settings, adaptive)
            rollouts = [Rollout.from_dict(x) for x in payload["resampled"]]
            by_trace[b.trace.id].record(b.position, rollouts, adaptive.count_no_answer)
        round_no += 1
    shared_work_done()  # a worker ends here
    frames = [trace_frame(st, settings.n, adaptive) for st in states]
    result = AdaptiveResult.from_frames(frames, settings.n, adaptive)
    write_table(run, ADAPTIVE_TABLE, result.positions)
    write_table(run, ADAPTIVE_TRACES_TABLE, result.traces)
    return result
