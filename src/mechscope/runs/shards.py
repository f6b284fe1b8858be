"""Per-sample shards: the unit of resumable work.

Each finished sample of a part is one JSON record (``<stem>.json``) plus, when it
holds arrays, one ``.npz`` file. The JSON is written last and is the commit mark:
a sample is done exactly when its JSON exists and is intact, so a crash at any point
leaves either a finished shard or nothing that counts. The JSON carries a checksum of
itself and of its arrays file: a shard damaged on disk (truncated, emptied, edited) is
found when its sample is looked up, removed and computed again.
:func:`mechscope.runs.shared_work.run_sharded` skips finished samples and returns results
read back from disk, so a resumed run returns exactly what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from mechscope.errors import DamagedFileError, InputError
from mechscope.progress import progress_mode
from mechscope.runs.atomic import atomic_write_bytes, atomic_write_text, is_temp_name
from mechscope.runs.integrity import Damaged, load_npz, seal, sha256, unseal
from mechscope.runs.payload import join_payload, split_payload
from mechscope.runs.rundir import RunDir, check_name

T = TypeVar("T")

RECOMPUTE = "rerun the command that made this run: it computes this sample again"

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
        #: json path -> ((inode, size, mtime), content key) of shards checked in full
        self._intact: dict[Path, tuple[tuple[int, int, int], str | None]] = {}

    def _json_path(self, sample_id: str) -> Path:
        return self.dir / f"{shard_stem(sample_id)}.json"

    def done(self, sample_id: str, key: str | None = None) -> bool:
        """Whether ``sample_id`` has a finished, intact shard (with ``key``: one computed
        from content with that :func:`~mechscope.runs.content_key.content_key`). A damaged
        shard is removed here, with a line on stderr, so the caller computes it again."""
        path = self._json_path(sample_id)
        if not path.is_file():
            return False
        try:
            stored_key = self._checked(path)
        except FileNotFoundError:
            return False  # replaced or removed by another process in the meantime
        except Damaged as why:
            self._discard(path, sample_id, str(why))
            return False
        return key is None or stored_key == key

    def __contains__(self, sample_id: object) -> bool:
        return isinstance(sample_id, str) and self.done(sample_id)

    def write(self, sample_id: str, payload: dict[str, Any], key: str | None = None) -> None:
        """Store ``payload`` for ``sample_id`` atomically (arrays first, the JSON commits);
        ``key``: the content key of the sample it was computed from. The JSON carries its
        own checksum and its arrays file's (:mod:`mechscope.runs.integrity`)."""
        stem = shard_stem(sample_id)
        arrays, record = split_payload(payload, sample_id)
        record["arrays_file"] = None
        record["content_key"] = key
        if arrays:
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            data = buffer.getvalue()
            # A fresh name per write: an overwrite never pairs an old JSON with new arrays.
            record["arrays_file"] = f"{stem}.{uuid.uuid4().hex[:12]}.npz"
            record["arrays_sha256"] = sha256(data)
            atomic_write_bytes(self.dir / record["arrays_file"], data)
        atomic_write_text(self.dir / f"{stem}.json", seal(record))
        for old in self.dir.glob(f"{stem}.*.npz"):  # arrays of a replaced write
            if old.name != record["arrays_file"] and not is_temp_name(old.name):
                old.unlink(missing_ok=True)

    def _open(self, path: Path, *, arrays: bool = True) -> tuple[dict[str, Any], bytes | None]:
        """The record at ``path`` and its arrays file's bytes, both checked against their
        checksums; :class:`Damaged` says why not. ``arrays=False``: the record alone."""
        record = unseal(path.read_bytes())
        fields = (("sample_id", str), ("keys", list), ("values", dict), ("arrays", list))
        for name, kind in fields:
            if not isinstance(record.get(name), kind):
                raise Damaged(f"no {name} in its record")
        name = record.get("arrays_file")
        if not name:
            if record["arrays"]:
                raise Damaged("its record names arrays but no arrays file")
            return record, None
        if not arrays:
            return record, None
        if not isinstance(name, str) or Path(name).name != name or not name.endswith(".npz"):
            raise Damaged(f"its record names a bad arrays file {name!r}")
        try:
            data = (self.dir / name).read_bytes()
        except FileNotFoundError:
            raise Damaged(f"its arrays file {name} is missing") from None
        expected = record.get("arrays_sha256")
        if expected is not None and sha256(data) != expected:
            raise Damaged(f"its arrays file {name} differs from its checksum")
        return record, data

    def _verify(self, path: Path) -> dict[str, Any]:
        """The record at ``path`` once it and its arrays are checked in full."""
        record, data = self._open(path)
        if data is not None:
            _load_arrays(data, record)
        return record

    def _checked(self, path: Path) -> str | None:
        """The content key of the intact shard at ``path``, checked in full once per
        version of the file in this process (a rewrite changes its inode, size or time)."""
        st = path.stat()
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._intact.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        record = self._verify(path)
        self._intact[path] = (signature, record.get("content_key"))
        return record.get("content_key")

    def _discard(self, path: Path, sample_id: str, why: str) -> None:
        """Remove a damaged shard (its JSON, and its arrays file when the JSON names one),
        saying so on stderr. Checked once more first: another process may have replaced it
        with an intact one since."""
        try:
            self._verify(path)
            return  # intact now
        except FileNotFoundError:
            return
        except Damaged:
            pass
        try:
            record, _ = self._open(path, arrays=False)
        except (Damaged, OSError):
            record = {}
        path.unlink(missing_ok=True)
        name = record.get("arrays_file")
        if isinstance(name, str) and Path(name).name == name:
            (self.dir / name).unlink(missing_ok=True)
        self._intact.pop(path, None)
        print(
            f"{path} (sample {sample_id!r}) was damaged ({why}): removed, to be computed again",
            file=sys.stderr,
            flush=True,
        )

    def read(self, sample_id: str) -> dict[str, Any]:
        """The payload stored for ``sample_id`` (:class:`KeyError` if it is not done;
        :class:`~mechscope.errors.DamagedFileError` naming the file if it is damaged: the
        command that made the run computes it again when rerun)."""
        path = self._json_path(sample_id)
        if not path.is_file():
            raise KeyError(f"part {self.part!r} has no finished shard for sample {sample_id!r}")
        try:
            record, data = self._open(path)
            arrays = _load_arrays(data, record) if data is not None else {}
        except Damaged as why:
            raise DamagedFileError(path, str(why), RECOMPUTE) from None
        if record.get("sample_id") != sample_id:
            raise InputError(
                f"shard {path.name} to hold this sample, it holds {record.get('sample_id')!r}",
                sample=sample_id,
                field=self.part,
            )
        return join_payload(record, arrays)

    def ids(self, *, skip_damaged: bool = False) -> list[str]:
        """Sample ids of all finished shards, sorted. A shard whose record is damaged is
        a :class:`~mechscope.errors.DamagedFileError`, or left out with ``skip_damaged``."""
        out = []
        for path in self.dir.glob("*.json"):
            if is_temp_name(path.name):
                continue
            try:
                out.append(self._open(path, arrays=False)[0]["sample_id"])
            except FileNotFoundError:
                continue
            except Damaged as why:
                if not skip_damaged:
                    raise DamagedFileError(path, str(why), RECOMPUTE) from None
        return sorted(out)

    def __len__(self) -> int:
        return sum(1 for p in self.dir.glob("*.json") if not is_temp_name(p.name))

    def read_all(self) -> dict[str, dict[str, Any]]:
        """Every finished shard, keyed by sample id (sorted)."""
        return {sample_id: self.read(sample_id) for sample_id in self.ids()}


def _load_arrays(data: bytes, record: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of a shard's ``.npz`` held in memory; :class:`Damaged` if the bundle is
    broken or lacks a member the record names."""
    arrays = load_npz(data)
    missing = [k for k in record["arrays"] if k not in arrays]
    if missing:
        raise Damaged(f"its arrays file lacks {', '.join(missing)}")
    return arrays


def report_reuse(store: ShardStore, label: str, ids: Sequence[str], todo: Sequence[str]) -> None:
    """One line, when a run resumes: how many samples were reused, recomputed because their
    content changed, computed new, and how many stored ones are no longer in the input."""
    if progress_mode() == "off" or (len(todo) == len(ids) and not len(store)):
        return
    stored = set(store.ids(skip_damaged=True))
    changed = sum(1 for i in todo if i in stored)
    dropped = len(stored - set(ids))
    line = f"{label}: {len(ids) - len(todo)} reused, {changed} recomputed (content changed), "
    line += f"{len(todo) - changed} new"
    if dropped:
        line += f"; {dropped} stored sample(s) not in the input are left out"
    print(line, file=sys.stderr, flush=True)
