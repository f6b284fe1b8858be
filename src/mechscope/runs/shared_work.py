"""Work that several processes can share through one run directory.

:func:`claimed_loop` does each unit of a part (a sample, a group of pairs) that is not done
yet, claiming it first (:mod:`mechscope.runs.claims`), so processes filling the same run
directory — the workers of ``--executor local|ray``, or two commands started by hand —
never compute a unit at the same time. Units another live process holds are waited for;
a dead process's claim is taken over, so a worker killed mid-unit loses nothing. With one
process it is the plain loop plus a claim file per unit. :func:`claimed_groups` claims
several units at once and works on them together (rollouts of several positions sampled in
one batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from mechscope.runs.claims import Claims
from mechscope.runs.shards import ShardStore

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
