"""Atomic writes leave either the old file or the new one, never a partial or temp file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mechscope.runs.atomic import (
    atomic_path,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    is_temp_name,
)


def test_success_renames_onto_final_and_leaves_no_temp(tmp_path):
    final = tmp_path / "sub" / "out.txt"
    with atomic_path(final) as tmp:
        assert tmp.parent == final.parent  # same directory: the rename cannot cross devices
        assert tmp.suffix == ".txt"
        assert is_temp_name(tmp.name)
        tmp.write_text("hello")
        assert not final.exists()  # nothing visible before the block ends
    assert final.read_text() == "hello"
    assert [p.name for p in final.parent.iterdir()] == ["out.txt"]


def test_exception_leaves_no_file_at_all(tmp_path):
    final = tmp_path / "out.bin"
    with pytest.raises(RuntimeError, match="boom"), atomic_path(final) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_exception_keeps_previous_content(tmp_path):
    final = atomic_write_text(tmp_path / "keep.txt", "old")
    with pytest.raises(KeyboardInterrupt), atomic_path(final) as tmp:
        tmp.write_text("new but unfinished")
        raise KeyboardInterrupt
    assert final.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_writer_that_picks_format_from_suffix_keeps_the_name(tmp_path):
    final = tmp_path / "a.npz"
    with atomic_path(final) as tmp:
        np.savez(tmp, x=np.arange(3))  # np.savez appends .npz unless the name ends with it
    with np.load(final) as data:
        np.testing.assert_array_equal(data["x"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]


def test_bytes_text_json_round_trip(tmp_path):
    assert atomic_write_bytes(tmp_path / "b", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert atomic_write_text(tmp_path / "t", "äö").read_text(encoding="utf-8") == "äö"
    obj = {"a": np.float32(1.5), "b": np.int64(3), "c": [1, None, "x"], "p": tmp_path}
    loaded = json.loads(atomic_write_json(tmp_path / "j.json", obj).read_text())
    assert loaded == {"a": 1.5, "b": 3, "c": [1, None, "x"], "p": str(tmp_path)}


def test_json_refuses_unknown_objects_and_writes_nothing(tmp_path):
    with pytest.raises(TypeError, match="object"):
        atomic_write_json(tmp_path / "j.json", {"x": object()})
    assert list(tmp_path.iterdir()) == []
