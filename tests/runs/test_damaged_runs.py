"""Damaged run directories repair themselves or say how, in one line.

Each case damages one file of a run the way a full disk, a cut copy or a hand edit would
(truncated, emptied, a flipped byte, deleted, not the format) and checks the contract:
a damaged shard is computed again (with a line saying so) and the results equal an
undamaged run's; a damaged table or array bundle is removed when the run resumes and
written again; anything that cannot be rebuilt (manifest, config) is a one-line
:class:`DamagedFileError` naming the file.
"""

from __future__ import annotations

import json
import os
import re
import time

import numpy as np
import pandas as pd
import pytest

from mechscope.errors import DamagedFileError
from mechscope.runs import (
    RunDir,
    ShardStore,
    read_arrays,
    read_table,
    run_sharded,
    table_intact,
    write_arrays,
    write_table,
)
from mechscope.runs.claims import DAMAGED_AFTER_S, Claims


def _work(x: int) -> dict:
    rng = np.random.default_rng(x)
    return {"curve": rng.normal(size=(3, 4)), "label": f"s{x}", "n": x}


def _items(n: int = 4) -> list[tuple[str, int]]:
    return [(f"s{i}", i) for i in range(n)]


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert list(x) == list(y)
        np.testing.assert_array_equal(x["curve"], y["curve"])
        assert x["label"] == y["label"] and x["n"] == y["n"]


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path) -> None:
    path.write_bytes(b"")


def _flip(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _arrays_file(store: ShardStore, stem: str):
    (npz,) = store.dir.glob(f"{stem}.*.npz")
    return npz


def _edit_value(path) -> None:
    record = json.loads(path.read_text())
    record["values"]["n"] = 99  # a hand edit: parses, but the checksum no longer matches
    path.write_text(json.dumps(record))


SHARD_DAMAGE = {
    "json truncated": lambda store: _truncate(store.dir / "s1.json"),
    "json emptied": lambda store: _empty(store.dir / "s1.json"),
    "json edited": lambda store: _edit_value(store.dir / "s1.json"),
    "json not an object": lambda store: (store.dir / "s1.json").write_text("[1, 2]"),
    "arrays truncated": lambda store: _truncate(_arrays_file(store, "s1")),
    "arrays emptied": lambda store: _empty(_arrays_file(store, "s1")),
    "arrays byte flipped": lambda store: _flip(_arrays_file(store, "s1")),
    "arrays deleted": lambda store: _arrays_file(store, "s1").unlink(),
}


@pytest.mark.parametrize("case", sorted(SHARD_DAMAGE))
def test_a_damaged_shard_is_computed_again_with_a_line(case, run, capsys):
    store = ShardStore(run, "part")
    clean = run_sharded(store, _items(), _work, progress=False)
    SHARD_DAMAGE[case](store)
    calls = []

    def work(x: int) -> dict:
        calls.append(x)
        return _work(x)

    again = run_sharded(ShardStore(run, "part"), _items(), work, progress=False)
    assert calls == [1]  # only the damaged sample
    _same(again, clean)
    err = capsys.readouterr().err
    assert "s1.json" in err and "was damaged" in err and "computed again" in err
    assert ShardStore(run, "part").read("s1")["n"] == 1


@pytest.mark.parametrize("case", sorted(SHARD_DAMAGE))
def test_reading_a_damaged_shard_is_one_line_naming_it(case, run):
    store = ShardStore(run, "part")
    run_sharded(store, _items(), _work, progress=False)
    SHARD_DAMAGE[case](store)
    with pytest.raises(DamagedFileError) as exc:
        ShardStore(run, "part").read("s1")
    message = str(exc.value)
    assert "\n" not in message and "s1.json" in message and "rerun the command" in message


def test_ids_names_a_damaged_record_or_skips_it_when_asked(run):
    store = ShardStore(run, "part")
    run_sharded(store, _items(), _work, progress=False)
    _truncate(store.dir / "s2.json")
    with pytest.raises(DamagedFileError, match=re.escape("s2.json")):
        store.ids()
    assert store.ids(skip_damaged=True) == ["s0", "s1", "s3"]


def test_a_shard_written_before_checksums_still_reads(run):
    store = ShardStore(run, "part")
    store.write("s0", {"x": 1.5, "a": np.arange(3)})
    path = store.dir / "s0.json"
    record = json.loads(path.read_text())
    for key in ("sha256", "arrays_sha256"):
        record.pop(key)
    path.write_text(json.dumps(record))
    assert store.done("s0") and store.read("s0")["x"] == 1.5


def test_a_replaced_shard_is_checked_again(run):
    """The full check is cached per version of the file: a rewrite is checked afresh."""
    store = ShardStore(run, "part")
    store.write("s0", {"a": np.arange(3)})
    assert store.done("s0")
    store.write("s0", {"a": np.arange(4)})
    _flip(_arrays_file(store, "s0"))
    assert not store.done("s0") and not (store.dir / "s0.json").exists()


# ------------------------------------------------------------------ manifest, config
MANIFEST_DAMAGE = {
    "truncated": _truncate,
    "emptied": _empty,
    "not an object": lambda p: p.write_text('"finished"'),
    "no seed": lambda p: p.write_text(json.dumps({"format": 1, "status": "x", "model": {}})),
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe{"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE))
def test_a_damaged_manifest_refuses_resume_in_one_line(case, tmp_path):
    RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    path = tmp_path / "r" / "manifest.json"
    MANIFEST_DAMAGE[case](path)
    before = path.read_bytes()
    with pytest.raises(DamagedFileError) as exc:
        RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and "start a new run" in message
    assert path.read_bytes() == before  # nothing changed


@pytest.mark.parametrize(
    "text", ["a: [1, 2\n", "- just\n- a list\n", "\x00\x01 binary", "key: 'unclosed\n"]
)
def test_a_config_that_does_not_parse_is_one_line(text, tmp_path):
    RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    path = tmp_path / "r" / "config.yaml"
    path.write_text(text)
    with pytest.raises(DamagedFileError) as exc:
        RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


# ------------------------------------------------------------------ tables and arrays
TABLE_DAMAGE = {"truncated": _truncate, "emptied": _empty, "byte flipped": _flip}


@pytest.mark.parametrize("case", sorted(TABLE_DAMAGE))
def test_reading_a_damaged_table_is_one_line(case, run):
    df = pd.DataFrame({"layer": np.arange(200), "value": np.linspace(0, 1, 200)})
    path = write_table(run, "curves", df)
    TABLE_DAMAGE[case](path)
    assert not table_intact(run, "curves")
    with pytest.raises(DamagedFileError) as exc:
        read_table(run, "curves")
    assert "\n" not in str(exc.value) and "curves.parquet" in str(exc.value)


@pytest.mark.parametrize("case", sorted(TABLE_DAMAGE))
def test_reading_a_damaged_array_bundle_is_one_line(case, run):
    path = write_arrays(run, "att", {"x": np.arange(5000.0)})
    TABLE_DAMAGE[case](path)
    with pytest.raises(DamagedFileError) as exc:
        read_arrays(run, "att")
    assert "\n" not in str(exc.value) and "att.npz" in str(exc.value)


def test_resume_removes_unreadable_tables_and_redoes_parts(tmp_path, capsys):
    run = RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    good = write_table(run, "good", pd.DataFrame({"x": [1, 2]}))
    bad = write_table(run, "bad", pd.DataFrame({"x": [1, 2]}))
    arrays = write_arrays(run, "arr", {"x": np.arange(3)})
    run.record_part("overview", 1.0, done=True)
    _truncate(bad)
    _empty(arrays)
    again = RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    assert good.exists() and not bad.exists() and not arrays.exists()
    assert not again.part_done("overview")  # the demo runs the part again from its shards
    err = capsys.readouterr().err
    assert "bad.parquet was damaged" in err and "arr.npz was damaged" in err


def test_resume_of_an_intact_run_keeps_parts_done(tmp_path):
    run = RunDir.create(tmp_path, "r", {"a": 1}, seed=0)
    write_table(run, "good", pd.DataFrame({"x": [1, 2]}))
    run.record_part("overview", 1.0, done=True)
    assert RunDir.create(tmp_path, "r", {"a": 1}, seed=0).part_done("overview")


# ------------------------------------------------------------------ claims
@pytest.mark.parametrize("content", [b"", b'{"host": "h", "pi', b"\xff\xfe", b'{"host": 1}'])
def test_a_damaged_claim_is_taken_over_once_it_is_old(content, run, capsys):
    store = ShardStore(run, "part")
    path = store.dir / "s0.claim"
    path.write_bytes(content)
    claims = Claims(store)
    assert not claims.claim("s0")  # perhaps still being written: left alone
    old = time.time() - DAMAGED_AFTER_S - 1
    os.utime(path, (old, old))
    assert claims.claim("s0")
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert "s0.claim was damaged" in capsys.readouterr().err


def test_a_claim_is_whole_when_it_appears_and_leaves_no_temporary_file(run):
    store = ShardStore(run, "part")
    assert Claims(store).claim("s0")
    holder = json.loads((store.dir / "s0.claim").read_text())
    assert holder["pid"] == os.getpid() and holder["token"]
    assert not Claims(store).claim("s0")  # held by a live process (this one)
    assert sorted(p.name for p in store.dir.iterdir()) == ["s0.claim"]


def test_a_claim_on_a_file_system_without_hard_links_is_still_exclusive(run, monkeypatch):
    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    store = ShardStore(run, "part")
    assert Claims(store).claim("s0")
    assert json.loads((store.dir / "s0.claim").read_text())["pid"] == os.getpid()
    assert not Claims(store).claim("s0")
