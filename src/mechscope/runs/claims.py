"""Exclusive claims on samples, so several workers can fill one run directory.

A worker about to compute a sample creates ``<stem>.claim`` beside the part's shards with
``O_CREAT | O_EXCL``: the file system lets exactly one creator win, on one machine or on
a shared mount. The claim names its holder (host and process id) and is removed when the
shard is written (or the work fails). A claim whose holder died (same host, process
gone) is taken over: it is first renamed aside — only one worker's rename can succeed —
and then claimed afresh (a live claim moved aside by a late taker is put back). Shards
stay the commit mark (:mod:`mechscope.runs.shards`): a claim only keeps two live workers
from doing the same sample at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from pathlib import Path

from mechscope.runs.shards import ShardStore, shard_stem

SUFFIX = ".claim"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Claims:
    """Claims on the samples of one :class:`ShardStore`."""

    def __init__(self, store: ShardStore):
        self.dir = store.dir
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}

    def _path(self, sample_id: str) -> Path:
        return self.dir / f"{shard_stem(sample_id)}{SUFFIX}"

    def claim(self, sample_id: str) -> bool:
        """Whether this process now holds ``sample_id`` (False: a live worker does)."""
        path = self._path(sample_id)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._take_over(path):
                    return False
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump({**self.me, "token": uuid.uuid4().hex}, fh)
            return True
        return False

    def release(self, sample_id: str) -> None:
        self._path(sample_id).unlink(missing_ok=True)

    def _take_over(self, path: Path) -> bool:
        """Move a dead holder's claim aside (True when it was dead and is gone now)."""
        try:
            holder = json.loads(path.read_text())
        except FileNotFoundError:
            return True  # released in the meantime
        except (OSError, ValueError):
            return False  # being written right now
        if holder.get("host") != self.me["host"] or _alive(int(holder.get("pid", -1))):
            return False
        aside = path.with_name(f".{path.name}.dead-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True  # another worker moved it first; race for the fresh claim
        try:
            moved = json.loads(aside.read_text())
        except (OSError, ValueError):
            moved = {}
        if moved.get("token") != holder.get("token"):
            # a live worker re-claimed it between our read and our rename: give it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True
