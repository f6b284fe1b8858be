"""Work that several processes can share through one run directory.

:func:`claimed_loop` does each unit of a part (a sample, a group of pairs) that is not done
yet, claiming it first (:mod:`mechscope.runs.claims`), so processes filling the same run
directory — the workers of ``--executor local|ray``, or two commands started by hand —
never compute a unit at the same time. Units another live process holds are waited for;
a dead process's claim is taken over, so a worker killed mid-unit loses nothing. With one
process it is the plain loop plus a claim file per unit.
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
    claims = Claims(store)
    pending = [u for u in units if not done(u)]
    while pending:
        held = []
        for unit in pending:
            if done(unit):
                continue
            uid = unit_id(unit)
            if not claims.claim(uid):
                held.append(unit)
                continue
            try:
                if not done(unit):  # finished between our look and our claim
                    work(unit)
            finally:
                claims.release(uid)
        if held:
            time.sleep(POLL_S)
        pending = held
