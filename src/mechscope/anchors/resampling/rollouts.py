"""Resampling a trace from every chunk boundary, resumably, one shard per position.

For each position ``p`` (see :mod:`mechscope.anchors.traces.trace`) the driver asks the sampler
for ``n`` free continuations of ``trace.prefix(p)`` and, optionally, ``n_forced``
short continuations of ``trace.forced_prompt(p)`` (answer right now). Each position is
written to the store as soon as it is done; a rerun skips finished positions and reads
them back, so an interrupted run resumes with identical results (every rollout has its own
seed). Workers sharing one run directory claim positions
(:func:`mechscope.runs.shared_work.claimed_loop`), so each is sampled once.
Rollouts without an answer are kept and flagged (``has_answer=False``), never dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from mechscope.anchors.config import RolloutSettings
from mechscope.anchors.resampling.sampler import Sampler
from mechscope.anchors.traces.chunking import first_chunk_text
from mechscope.anchors.traces.trace import Trace
from mechscope.data.math_answers import extract_answer, is_equivalent, read_forced_answer
from mechscope.errors import InputError
from mechscope.runs.shards import ShardStore
from mechscope.runs.shared_work import claimed_loop


@dataclass(frozen=True)
class Rollout:
    """One continuation, seen from chunk ``chunk_index`` (``kept``: was that chunk kept)."""

    chunk_index: int
    kept: bool
    text: str
    first_sentence: str
    answer: str | None
    is_correct: bool
    has_answer: bool
    forced: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rollout:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def make_rollout(continuation: str, gold: str, position: int, *, forced: bool = False) -> Rollout:
    """Parse a continuation of ``trace.prefix(position)`` (or of its forced prompt)."""
    if forced:
        answer, first = read_forced_answer(continuation), ""
    else:
        answer, first = extract_answer(continuation), first_chunk_text(continuation)
    has_answer = answer is not None
    return Rollout(
        chunk_index=position,
        kept=False,
        text=continuation,
        first_sentence=first,
        answer=answer,
        is_correct=has_answer and is_equivalent(answer, gold),
        has_answer=has_answer,
        forced=forced,
    )


@dataclass
class TraceRollouts:
    """All rollouts of one trace, by position (``resampled``) and forced (``forced``)."""

    trace: Trace
    resampled: dict[int, list[Rollout]] = field(default_factory=dict)
    forced: dict[int, list[Rollout]] = field(default_factory=dict)

    def removed(self, i: int) -> list[Rollout]:
        """Rollouts where chunk ``i`` was removed and resampled."""
        return [replace(r, chunk_index=i, kept=False) for r in self.resampled.get(i, [])]

    def kept(self, i: int) -> list[Rollout]:
        """Rollouts where chunk ``i`` was kept (= those that resample chunk ``i + 1``)."""
        return [replace(r, chunk_index=i, kept=True) for r in self.resampled.get(i + 1, [])]

    def n_without_answer(self) -> dict[int, int]:
        """Per position, how many free rollouts gave no answer."""
        return {p: sum(not r.has_answer for r in rs) for p, rs in self.resampled.items()}


class ShardLike(Protocol):
    """What the driver needs from a store (``mechscope.runs.shards.ShardStore`` fits)."""

    def done(self, sample_id: str) -> bool: ...

    def write(self, sample_id: str, payload: dict[str, Any]) -> None: ...

    def read(self, sample_id: str) -> dict[str, Any]: ...


def shard_id(trace_id: str, position: int) -> str:
    return f"{trace_id}__p{position:04d}"


def positions(trace: Trace, max_chunks: int | None) -> range:
    """Positions to resample so that chunks ``0 … m-1`` get both their rollout sets."""
    m = trace.n_chunks if max_chunks is None else min(trace.n_chunks, max_chunks)
    return range(m + 1)


def position_seed(seed: int, position: int, kind: str) -> int:
    """A seed per (run seed, position, kind): positions can be computed in any order."""
    digest = hashlib.sha256(f"{seed}:{position}:{kind}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _sample_position(
    trace: Trace, sampler: Sampler, position: int, settings: RolloutSettings
) -> dict[str, Any]:
    texts = sampler.generate(
        [trace.prefix(position)],
        n=settings.n,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=position_seed(settings.seed, position, "free"),
    )[0]
    free = [make_rollout(t, trace.gold, position) for t in texts]
    forced: list[Rollout] = []
    if settings.n_forced > 0:
        forced_texts = sampler.generate(
            [trace.forced_prompt(position)],
            n=settings.n_forced,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.forced_max_new_tokens,
            seed=position_seed(settings.seed, position, "forced"),
        )[0]
        forced = [make_rollout(t, trace.gold, position, forced=True) for t in forced_texts]
    return {
        "trace_id": trace.id,
        "position": position,
        "prefix_chars": len(trace.prefix(position)),
        "settings": asdict(settings),
        "resampled": [r.to_dict() for r in free],
        "forced": [r.to_dict() for r in forced],
    }


def _check_payload(
    payload: dict[str, Any], trace: Trace, position: int, settings: RolloutSettings
) -> None:
    expected = {"position": position, "prefix_chars": len(trace.prefix(position))}
    expected["settings"] = asdict(settings)
    for key, value in expected.items():
        if payload.get(key) != value:
            raise InputError(
                f"a stored shard made with {key}={value!r}, found {payload.get(key)!r} "
                "(use a new run directory for new settings)",
                sample=shard_id(trace.id, position),
                field=key,
            )


def _stored(
    store: ShardLike, trace: Trace, position: int, settings: RolloutSettings
) -> dict[str, Any]:
    """Position ``position``'s finished payload, checked against ``settings``."""
    payload = store.read(shard_id(trace.id, position))
    _check_payload(payload, trace, position, settings)
    return payload


def resample_trace(
    trace: Trace,
    sampler: Sampler,
    store: ShardLike | None = None,
    *,
    settings: RolloutSettings | None = None,
    positions: Iterable[int] | None = None,
    on_position: Callable[[int], None] | None = None,
    shared: bool = False,
) -> TraceRollouts:
    """Rollouts from each position (default ``0 … n_chunks``), resumable through ``store``.

    Finished positions are read back from ``store`` (their settings must match, checked
    before anything new is sampled); new ones are sampled and written at once. With
    ``shared`` (``store`` a run's :class:`~mechscope.runs.shards.ShardStore`) the positions
    go through :func:`~mechscope.runs.shared_work.claimed_loop`: each is sampled only by the
    worker that claims it, and other workers on the same run directory read it back once
    it is written. ``on_position(p)`` is called after each position.
    """
    settings = settings or RolloutSettings()
    todo = list(range(trace.n_chunks + 1)) if positions is None else sorted(set(positions))
    if shared and not isinstance(store, ShardStore):
        raise InputError("a run's shard store to share positions through", field="store")
    payloads: dict[int, dict[str, Any]] = {}

    def finished(p: int) -> bool:
        return store is not None and store.done(shard_id(trace.id, p))

    def read_back(p: int) -> None:
        assert store is not None
        payloads[p] = _stored(store, trace, p, settings)
        if on_position is not None:
            on_position(p)

    def sample(p: int) -> None:
        payload = _sample_position(trace, sampler, p, settings)
        if store is not None:
            store.write(shard_id(trace.id, p), payload)
        payloads[p] = payload
        if on_position is not None:
            on_position(p)

    for p in todo:
        if finished(p):
            read_back(p)
    rest = [p for p in todo if p not in payloads]
    if isinstance(store, ShardStore) and shared:
        claimed_loop(store, rest, lambda p: shard_id(trace.id, p), finished, sample)
    else:
        for p in rest:
            sample(p)
    for p in rest:
        if p not in payloads:  # sampled by another worker
            read_back(p)
    result = TraceRollouts(trace)
    for p in todo:
        result.resampled[p] = [Rollout.from_dict(d) for d in payloads[p]["resampled"]]
        result.forced[p] = [Rollout.from_dict(d) for d in payloads[p]["forced"]]
    return result
