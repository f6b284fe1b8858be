"""A full disk (ENOSPC) is one line, leaves nothing half-written as if complete, and the
run resumes once space is freed.

The disk is made to fill by raising ``OSError(ENOSPC)`` where a real one surfaces: creating
the temporary file, writing it, flushing it to disk, renaming it. The atomic write must
remove its temporary file and leave the previous content in place every time.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mechscope.errors import DiskFullError
from mechscope.runs import RunDir, ShardStore, atomic, run_sharded, write_table
from mechscope.runs.claims import Claims


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


POINTS = {
    "creating the temporary file": ("mkstemp", tempfile),
    "flushing it to disk": ("_fsync_file", atomic),
    "renaming it": ("replace", os),
}


@pytest.mark.parametrize("point", sorted(POINTS))
def test_atomic_write_on_a_full_disk_is_one_line_and_keeps_the_old_file(
    point, tmp_path, monkeypatch
):
    target = tmp_path / "table.txt"
    atomic.atomic_write_text(target, "old")
    name, owner = POINTS[point]
    monkeypatch.setattr(owner, name, _enospc)
    with pytest.raises(DiskFullError) as exc:
        atomic.atomic_write_text(target, "new")
    monkeypatch.undo()
    message = str(exc.value)
    assert "\n" not in message and str(target) in message and "no space left" in message
    assert "rerun the same command to resume" in message
    assert target.read_text() == "old" and _files(tmp_path) == {"table.txt"}


def test_a_full_disk_inside_the_writer_removes_the_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(pd.DataFrame, "to_parquet", _enospc)
    with pytest.raises(DiskFullError, match=re.escape("curves.parquet")):
        write_table(tmp_path, "curves", pd.DataFrame({"x": [1]}))
    assert _files(tmp_path) == set()


def test_quota_exceeded_is_worded_as_such(tmp_path, monkeypatch):
    def edquot(*args, **kwargs):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(atomic, "_fsync_file", edquot)
    with pytest.raises(DiskFullError, match="disk quota exceeded"):
        atomic.atomic_write_text(tmp_path / "x.txt", "x")


def _work(x: int) -> dict:
    return {"curve": np.random.default_rng(x).normal(size=(2, 3)), "n": x}


@pytest.mark.parametrize("fail_at", range(1, 9))
def test_a_sharded_part_resumes_after_the_disk_filled_at_any_write(fail_at, run, monkeypatch):
    """Each sample writes two files (arrays, then the JSON that commits them); the disk
    fills at write ``fail_at``. What is done stays done and intact, nothing else counts as
    done, and the rerun returns what an uninterrupted run returns."""
    clean = run_sharded(ShardStore(run, "clean"), [(f"s{i}", i) for i in range(4)], _work)
    writes = {"n": 0}
    fsync = atomic._fsync_file

    def filling(path):
        writes["n"] += 1
        if writes["n"] == fail_at:
            _enospc()
        fsync(path)

    monkeypatch.setattr(atomic, "_fsync_file", filling)
    items = [(f"s{i}", i) for i in range(4)]
    with pytest.raises(DiskFullError):
        run_sharded(ShardStore(run, "part"), items, _work, progress=False)
    monkeypatch.undo()
    store = ShardStore(run, "part")
    done = [i for i, _ in items if store.done(i)]
    assert len(done) == (fail_at - 1) // 2  # a sample counts once its JSON is written
    assert not [p for p in store.dir.iterdir() if atomic.TEMP_MARKER in p.name]
    again = run_sharded(store, items, _work, progress=False)
    for a, b in zip(again, clean, strict=True):
        np.testing.assert_array_equal(a["curve"], b["curve"])
    assert len(list(store.dir.glob("*.npz"))) == 4  # the orphan arrays file was replaced


def test_a_run_whose_manifest_could_not_be_written_is_completed_by_the_rerun(tmp_path, monkeypatch):
    calls = {"n": 0}
    fsync = atomic._fsync_file

    def second_write_fails(path):
        calls["n"] += 1
        if calls["n"] == 2:  # the config is written, the manifest is not
            _enospc()
        fsync(path)

    monkeypatch.setattr(atomic, "_fsync_file", second_write_fails)
    with pytest.raises(DiskFullError, match=re.escape("manifest.json")):
        RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    monkeypatch.undo()
    assert not (tmp_path / "r" / "manifest.json").exists()
    run = RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    assert run.manifest["status"] == "running" and not run.resumed


def test_a_claim_on_a_full_disk_is_one_line_and_leaves_no_file(run, monkeypatch):
    store = ShardStore(run, "part")
    monkeypatch.setattr(Path, "write_bytes", _enospc)
    with pytest.raises(DiskFullError, match=re.escape("s0.claim")):
        Claims(store).claim("s0")
    monkeypatch.undo()
    assert list(store.dir.iterdir()) == []
    assert Claims(store).claim("s0")
