"""Work that several processes can share through one run directory.

:func:`claimed_loop` does each unit of a part (a sample, a group of pairs) that is not done
yet, claiming it first (:mod:`mechscope.runs.claims`), so processes filling the same run
directory — the workers of ``--executor local|ray``, or two commands started by hand —
never compute a unit at the same time. Units another live process holds are waited for;
a dead process's claim is taken over, so a worker killed mid-unit loses nothing. With one
process it is the plain loop plus a claim file per unit. :func:`claimed_groups` claims
several units at once and works on them together (rollouts of several positions sampled in
one batch). :func:`run_sharded` is the loop of a part with one shard per sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mechscope.errors import InputError
from mechscope.progress import make_progress
from mechscope.runs.claims import Claims
from mechscope.runs.content_key import content_key
from mechscope.runs.shards import ShardStore, report_reuse, shard_stem

T = TypeVar("T")
U = TypeVar("U")

#: Seconds between looks at units other processes hold.
POLL_S = 0.25


def claimed_loop(
    store: ShardStore,
    units: Sequence[U],
    unit_id: Callable[[U], str],
    done: Callable[[U], bool],
    work: Callable[[U], None],
) -> None:
    """``work(u)`` for every unit not ``done(u)``, each by exactly one process at a time;
    returns when every unit is done (by this process or another)."""
    claimed_groups(store, units, unit_id, done, lambda group: work(group[0]))


def claimed_groups(
    store: ShardStore,
    units: Sequence[U],
    unit_id: Callable[[U], str],
    done: Callable[[U], bool],
    work: Callable[[list[U]], None],
    *,
    size: Callable[[U], int] = lambda u: 1,
    limit: int = 1,
) -> None:
    """``work(group)`` on groups of claimed units not ``done``, in order, each group as large
    as fits ``limit`` (sizes by ``size``; one unit at least); every unit is worked on by
    exactly one process. Returns when every unit is done (by this process or another)."""
    claims = Claims(store)
    pending = [u for u in units if not done(u)]
    while pending:
        held: list[U] = []
        group: list[U] = []
        try:
            for unit in pending:
                if done(unit):
                    continue
                if not claims.claim(unit_id(unit)):
                    held.append(unit)
                    continue
                group.append(unit)
                if done(unit):  # finished between our look and our claim
                    claims.release(unit_id(group.pop()))
                    continue
                if sum(size(u) for u in group) >= limit:
                    _work_and_release(claims, group, unit_id, work)
            _work_and_release(claims, group, unit_id, work)
        finally:
            for unit in group:  # a failed group: give its claims back
                claims.release(unit_id(unit))
        if held:
            time.sleep(POLL_S)
        pending = held


def _work_and_release(
    claims: Claims, group: list[U], unit_id: Callable[[U], str], work: Callable[[list[U]], None]
) -> None:
    """``work(group)``, then the group's claims released and the group emptied (in place)."""
    if not group:
        return
    work(list(group))
    for unit in group:
        claims.release(unit_id(unit))
    group.clear()


def run_sharded(
    store: ShardStore,
    items: Sequence[tuple[str, T]],
    fn: Callable[[T], dict[str, Any]],
    progress: bool = True,
    description: str | None = None,
    key: Callable[[T], str] | None = content_key,
) -> list[dict[str, Any]]:
    """Compute ``fn(item)`` for every ``(sample_id, item)`` without a finished shard of
    the same content (``key(item)``; ``None``: by id alone).

    Each result is written atomically as soon as it is computed, so an exception (or
    a kill) loses at most the sample in flight. Returns every sample's payload, in
    input order, as read back from the store: identical whether it was computed now
    or in an earlier, interrupted run. Samples that were in the store but are not in
    ``items`` are left out; a line says what was reused and what recomputed. Each sample is
    claimed before it is computed (:func:`claimed_loop`), so
    several processes can fill one run directory.
    """
    ids = [sample_id for sample_id, _ in items]
    seen: set[str] = set()
    for sample_id in ids:
        shard_stem(sample_id)  # validates
        if sample_id in seen:
            raise InputError("unique sample ids within a part", sample=sample_id, field=store.part)
        seen.add(sample_id)
    keys = {sample_id: key(item) if key is not None else None for sample_id, item in items}
    todo = [(i, item) for i, item in items if not store.done(i, keys[i])]
    report_reuse(store, description or store.part, ids, [i for i, _ in todo])
    if todo:
        bar = make_progress() if progress else None  # honours MECHSCOPE_PROGRESS=0
        label = description or store.part
        if bar is not None:
            bar.start()
            task = bar.add_task(label, total=len(ids), completed=len(ids) - len(todo))

        def one(unit: tuple[str, T]) -> None:
            sample_id, item = unit
            if bar is not None:  # which sample is in flight
                bar.update(task, description=f"{label} · {sample_id[:32]}")
            payload = fn(item)
            if not isinstance(payload, dict):
                raise InputError(
                    f"fn to return a dict, got {type(payload).__name__}",
                    sample=sample_id,
                    field=store.part,
                )
            store.write(sample_id, payload, keys[sample_id])
            if bar is not None:
                bar.advance(task)

        try:  # claimed: other processes on this run directory can share the samples
            claimed_loop(store, todo, lambda u: u[0], lambda u: store.done(u[0], keys[u[0]]), one)
        finally:
            if bar is not None:
                bar.stop()
    return [store.read(sample_id) for sample_id in ids]
