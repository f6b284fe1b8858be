"""Per-sample shards: exact payload round trip, safe names, and crash-safe resume."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.runs import RunDir, ShardStore, run_sharded, shard_stem


def _work(x: int) -> dict:
    """A deterministic per-sample computation with every payload kind."""
    rng = np.random.default_rng(x)
    return {
        "curve": rng.normal(size=(3, 5)).astype(np.float32),  # [layers, tokens]
        "total": np.float32(rng.normal()),
        "count": x,
        "label": f"s{x}",
        "tokens": ["a", "b", str(x)],
        "nested": {"k": [1.5, None, True]},
    }


def _assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        if isinstance(a[key], np.ndarray | np.generic):
            assert type(a[key]) is type(b[key]) and a[key].dtype == b[key].dtype
            np.testing.assert_array_equal(a[key], b[key])
        else:
            assert a[key] == b[key]


def test_payload_round_trip_is_exact(run):
    store = ShardStore(run, "lens")
    payload = {
        "arr": np.arange(6, dtype=np.int16).reshape(2, 3),
        "zero_d": np.array(2.5),
        "f32": np.float32(0.1),
        "i64": np.int64(-3),
        "t": torch.tensor([1.0, 2.0], dtype=torch.float64),
        "nan": float("nan"),
        "none": None,
        "flag": False,
        "text": "ünïcode",
        "tup": (1, 2),
        "strs": np.array(["x", "yz"]),
    }
    store.write("s1", payload)
    back = store.read("s1")
    assert list(back) == list(payload)
    assert back["arr"].dtype == np.int16 and back["arr"].shape == (2, 3)
    assert isinstance(back["zero_d"], np.ndarray) and back["zero_d"].shape == ()
    assert type(back["f32"]) is np.float32 and back["f32"] == np.float32(0.1)
    assert type(back["i64"]) is np.int64 and back["i64"] == -3
    assert isinstance(back["t"], np.ndarray) and back["t"].dtype == np.float64
    np.testing.assert_array_equal(back["t"], [1.0, 2.0])
    assert np.isnan(back["nan"]) and back["none"] is None and back["flag"] is False
    assert back["text"] == "ünïcode" and back["tup"] == [1, 2]
    np.testing.assert_array_equal(back["strs"], ["x", "yz"])


def test_refuses_pickle_only_values(run):
    store = ShardStore(run, "p")
    with pytest.raises(InputError, match="object arrays"):
        store.write("s", {"x": np.array([None, 1], dtype=object)})
    with pytest.raises(InputError, match="top-level"):
        store.write("s", {"x": [np.zeros(2)]})
    with pytest.raises(InputError, match="dict payload"):
        store.write("s", [1, 2])
    assert not store.done("s") and store.ids() == []


def test_sample_ids_map_to_stable_safe_distinct_names(run):
    ids = ["plain-id_1", "a/b", "A", "a", "x--y", "ünï", "." * 3, "q" * 300, "C:\\evil"]
    stems = [shard_stem(i) for i in ids]
    assert len(set(s.lower() for s in stems)) == len(ids)  # distinct even case-insensitively
    assert all(len(s) <= 64 and "/" not in s and "\\" not in s for s in stems)
    assert stems[0] == "plain-id_1" and stems[3] == "a"
    assert stems[1] == "a_b--" + hashlib.sha256(b"a/b").hexdigest()[:16]
    store = ShardStore(run, "ids")
    for i, sid in enumerate(ids):
        store.write(sid, {"i": i})
    assert store.ids() == sorted(ids)
    assert {sid: p["i"] for sid, p in store.read_all().items()} == {s: i for i, s in enumerate(ids)}


def test_reads_ignore_unfinished_temp_files_and_missing_ids(run):
    store = ShardStore(run, "tmp")
    store.write("done", {"x": np.ones(2)})
    (store.dir / ".late.tmp-abc.json").write_text("{partial")
    (store.dir / ".late.tmp-abc.npz").write_bytes(b"PK")
    assert store.ids() == ["done"] and len(store) == 1
    with pytest.raises(KeyError, match="late"):
        store.read("late")


def test_failed_array_write_commits_nothing(run, monkeypatch):
    store = ShardStore(run, "crash")

    def broken(fh, **arrays):
        fh.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError):
        store.write("s", {"x": np.zeros(3)})
    assert not store.done("s") and list(store.dir.iterdir()) == []


def test_overwrite_replaces_arrays_without_leftovers(run):
    store = ShardStore(run, "ow")
    store.write("s", {"x": np.zeros(3)})
    store.write("s", {"x": np.ones(2)})
    np.testing.assert_array_equal(store.read("s")["x"], np.ones(2))
    store.write("s", {"y": 1})
    assert store.read("s") == {"y": 1}
    assert sorted(p.name for p in store.dir.iterdir()) == ["s.json"]


def test_resume_after_crash_skips_finished_shards_and_matches_clean_run(tmp_path):
    items = [(f"sample-{i}", i) for i in range(8)]
    calls: list[int] = []
    crash = {"on": True}

    def flaky(x: int) -> dict:
        calls.append(x)
        if x == 5 and crash["on"]:
            raise RuntimeError("simulated crash")
        return _work(x)

    run = RunDir.create(tmp_path, "crashy", {"n": 8}, seed=0)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_sharded(ShardStore(run, "part"), items, flaky, progress=False)
    assert ShardStore(run, "part").ids() == sorted(f"sample-{i}" for i in range(5))

    assert calls == [0, 1, 2, 3, 4, 5]
    calls.clear()
    crash["on"] = False
    resumed_run = RunDir.create(tmp_path, "crashy", {"n": 8}, seed=0)
    resumed = run_sharded(ShardStore(resumed_run, "part"), items, flaky, progress=True)
    assert calls == [5, 6, 7]  # finished shards were not recomputed

    clean_run = RunDir.create(tmp_path, "clean", {"n": 8}, seed=0)
    clean = run_sharded(ShardStore(clean_run, "part"), items, _work, progress=False)
    assert len(resumed) == len(clean) == 8
    for a, b in zip(resumed, clean, strict=True):
        _assert_same(a, b)
    assert [r["count"] for r in resumed] == list(range(8))  # input order

    calls.clear()
    again = run_sharded(ShardStore(resumed_run, "part"), items, flaky, progress=False)
    assert calls == []
    for a, b in zip(again, clean, strict=True):
        _assert_same(a, b)


def test_run_sharded_refuses_duplicates_and_non_dicts(run):
    store = ShardStore(run, "dup")
    with pytest.raises(InputError, match="unique"):
        run_sharded(store, [("a", 1), ("a", 2)], _work, progress=False)
    with pytest.raises(InputError, match="return a dict"):
        run_sharded(store, [("a", 1)], lambda x: x, progress=False)


def test_shard_files_are_plain_json_and_npz(run):
    store = ShardStore(run, "fmt")
    store.write("s", _work(1))
    record = json.loads((store.dir / "s.json").read_text())
    assert record["sample_id"] == "s" and record["values"]["label"] == "s1"
    (npz,) = store.dir.glob("s.*.npz")
    with np.load(npz, allow_pickle=False) as data:
        np.testing.assert_array_equal(data["curve"], _work(1)["curve"])
