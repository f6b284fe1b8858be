"""Per-sample shards: the unit of resumable work.

Each finished sample of a part is one JSON record (``<stem>.json``) plus, when it
holds arrays, one ``.npz`` file. The JSON is written last and is the commit mark:
a sample is done exactly when its JSON exists, so a crash at any point leaves
either a finished shard or nothing that counts. :func:`run_sharded` skips finished
samples and returns results read back from disk, so a resumed run returns exactly
what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from mechscope.errors import InputError
from mechscope.progress import make_progress, progress_mode
from mechscope.runs.atomic import atomic_path, atomic_write_text, is_temp_name
from mechscope.runs.content_key import content_key
from mechscope.runs.payload import join_payload, record_to_json, split_payload
from mechscope.runs.rundir import RunDir, check_name

T = TypeVar("T")

_SAFE_ID = re.compile(r"^[a-z0-9_][a-z0-9_-]{0,63}$")


def shard_stem(sample_id: str) -> str:
    """The file stem of a sample id: stable, safe on every file system, collision-free.

    Short lowercase ids made of ``[a-z0-9_-]`` (without ``--``) are used as they are.
    Any other id becomes ``<cleaned id>--<16 hex of its sha256>``: the hash keeps ids
    that differ only in case or in unsafe characters apart (also on case-insensitive
    file systems), and ``--`` never occurs in a kept id, so the two kinds cannot clash.
    """
    if not isinstance(sample_id, str) or not sample_id:
        raise InputError(f"a non-empty string sample id, got {sample_id!r}", field="sample_id")
    if _SAFE_ID.match(sample_id) and "--" not in sample_id:
        return sample_id
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", sample_id).strip("_")[:40] or "id"
    digest = hashlib.sha256(sample_id.encode("utf-8")).hexdigest()[:16]
    return f"{cleaned}--{digest}"


class ShardStore:
    """The finished samples of one part of a run (``shards/<part>/``)."""

    def __init__(self, run: RunDir | Path | str, part: str):
        self.part = check_name(part, field="part")
        base = run.path if isinstance(run, RunDir) else Path(run)
        self.dir = base / "shards" / self.part
        self.dir.mkdir(parents=True, exist_ok=True)

    def _json_path(self, sample_id: str) -> Path:
        return self.dir / f"{shard_stem(sample_id)}.json"

    def done(self, sample_id: str, key: str | None = None) -> bool:
        """Whether ``sample_id`` has a finished shard (with ``key``: one computed from
        content with that :func:`~mechscope.runs.content_key.content_key`)."""
        path = self._json_path(sample_id)
        if not path.is_file():
            return False
        return key is None or self._load(path).get("content_key") == key

    def __contains__(self, sample_id: object) -> bool:
        return isinstance(sample_id, str) and self.done(sample_id)

    def write(self, sample_id: str, payload: dict[str, Any], key: str | None = None) -> None:
        """Store ``payload`` for ``sample_id`` atomically (arrays first, the JSON commits);
        ``key``: the content key of the sample it was computed from."""
        stem = shard_stem(sample_id)
        arrays, record = split_payload(payload, sample_id)
        record["arrays_file"] = None
        record["content_key"] = key
        if arrays:
            # A fresh name per write: an overwrite never pairs an old JSON with new arrays.
            record["arrays_file"] = f"{stem}.{uuid.uuid4().hex[:12]}.npz"
            with atomic_path(self.dir / record["arrays_file"]) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
        atomic_write_text(self.dir / f"{stem}.json", record_to_json(record))
        for old in self.dir.glob(f"{stem}.*.npz"):  # arrays of a replaced write
            if old.name != record["arrays_file"] and not is_temp_name(old.name):
                old.unlink(missing_ok=True)

    def _load(self, json_path: Path) -> dict[str, Any]:
        return json.loads(json_path.read_text(encoding="utf-8"))

    def read(self, sample_id: str) -> dict[str, Any]:
        """The payload stored for ``sample_id`` (:class:`KeyError` if it is not done)."""
        path = self._json_path(sample_id)
        if not path.is_file():
            raise KeyError(f"part {self.part!r} has no finished shard for sample {sample_id!r}")
        record = self._load(path)
        if record.get("sample_id") != sample_id:
            raise InputError(
                f"shard {path.name} to hold this sample, it holds {record.get('sample_id')!r}",
                sample=sample_id,
                field=self.part,
            )
        arrays: dict[str, np.ndarray] = {}
        if record.get("arrays_file"):
            with np.load(self.dir / record["arrays_file"], allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        return join_payload(record, arrays)

    def ids(self) -> list[str]:
        """Sample ids of all finished shards, sorted."""
        out = []
        for path in self.dir.glob("*.json"):
            if not is_temp_name(path.name):
                out.append(self._load(path)["sample_id"])
        return sorted(out)

    def __len__(self) -> int:
        return sum(1 for p in self.dir.glob("*.json") if not is_temp_name(p.name))

    def read_all(self) -> dict[str, dict[str, Any]]:
        """Every finished shard, keyed by sample id (sorted)."""
        return {sample_id: self.read(sample_id) for sample_id in self.ids()}


def report_reuse(store: ShardStore, label: str, ids: Sequence[str], todo: Sequence[str]) -> None:
    """One line, when a run resumes: how many samples were reused, recomputed because their
    content changed, computed new, and how many stored ones are no longer in the input."""
    if progress_mode() == "off" or (len(todo) == len(ids) and not len(store)):
        return
    stored = set(store.ids())
    changed = sum(1 for i in todo if i in stored)
    dropped = len(stored - set(ids))
    line = f"{label}: {len(ids) - len(todo)} reused, {changed} recomputed (content changed), "
    line += f"{len(todo) - changed} new"
    if dropped:
        line += f"; {dropped} stored sample(s) not in the input are left out"
    print(line, file=sys.stderr, flush=True)


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
    claimed before it is computed (:func:`~mechscope.runs.shared_work.claimed_loop`), so
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
        from mechscope.runs.shared_work import claimed_loop

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
