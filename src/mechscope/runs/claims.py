"""Exclusive claims on samples, so several workers can fill one run directory.

A worker about to compute a sample creates ``<stem>.claim`` beside the part's shards with
``O_CREAT | O_EXCL``: the file system lets exactly one creator win, on one machine or on
a shared mount. The claim names its holder (host and process id) and is removed when the
shard is written (or the work fails). A claim whose holder died (same host, process
gone) is taken over: it is first renamed aside — only one worker's rename can succeed —
and then claimed afresh (a live claim moved aside by a late taker is put back). A claim
file is made whole in one step (a hard link of a written file), so one that does not parse
is damaged, and is taken over once it has stayed so for a few seconds. Shards
stay the commit mark (:mod:`mechscope.runs.shards`): a claim only keeps two live workers
from doing the same sample at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path

from mechscope.runs.atomic import TEMP_MARKER, disk_full_named
from mechscope.runs.rundir import CLAIM_SUFFIX
from mechscope.runs.shards import ShardStore, shard_stem

#: Seconds after which a claim file that does not parse counts as damaged, not in writing.
DAMAGED_AFTER_S = 10.0


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
        return self.dir / f"{shard_stem(sample_id)}{CLAIM_SUFFIX}"

    def claim(self, sample_id: str) -> bool:
        """Whether this process now holds ``sample_id`` (False: a live worker does)."""
        path = self._path(sample_id)
        for _ in range(2):
            if self._create(path):
                return True
            if not self._take_over(path):
                return False
        return False

    def release(self, sample_id: str) -> None:
        self._path(sample_id).unlink(missing_ok=True)

    def _create(self, path: Path) -> bool:
        """Make the claim file whole in one step: written under a temporary name, then
        hard-linked onto its own (a link fails when the name exists), so no reader ever sees
        half a claim. Where hard links are not supported, created exclusively, then written.
        False when the claim exists already."""
        body = json.dumps({**self.me, "token": uuid.uuid4().hex}).encode("utf-8")
        tmp = path.with_name(f".{path.name}{TEMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with disk_full_named(path):
                tmp.write_bytes(body)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                except OSError:  # no hard links on this file system
                    return self._create_in_place(path, body)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    @staticmethod
    def _create_in_place(path: Path, body: bytes) -> bool:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, body)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return True

    def _take_over(self, path: Path) -> bool:
        """Move a dead holder's claim aside (True when it was dead and is gone now). A claim
        file that does not parse and has not changed for :data:`DAMAGED_AFTER_S` seconds is
        damaged (a claim is a few bytes, written at once): it is taken over too."""
        try:
            raw = path.read_bytes()
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return True  # released in the meantime
        holder = _holder(raw)
        if holder is None:
            if age < DAMAGED_AFTER_S:
                return False  # perhaps being written right now
            print(f"{path} was damaged (not a claim): taken over", file=sys.stderr, flush=True)
        elif holder["host"] != self.me["host"] or _alive(holder["pid"]):
            return False
        aside = path.with_name(f".{path.name}.dead-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True  # another worker moved it first; race for the fresh claim
        try:
            moved = aside.read_bytes()
        except OSError:
            moved = b""
        if moved != raw:
            # a live worker re-claimed it between our read and our rename: give it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True


def _holder(raw: bytes) -> dict | None:
    """The claim's holder (``host``: str, ``pid``: int), or None if it does not parse."""
    try:
        holder = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(holder, dict) or not isinstance(holder.get("host"), str):
        return None
    pid = holder.get("pid")
    return holder if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
