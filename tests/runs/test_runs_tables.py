"""Parquet tables and npz arrays round-trip exactly and are written atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mechscope.errors import InputError
from mechscope.runs import has_table, read_arrays, read_table, write_arrays, write_table


def test_parquet_round_trip_keeps_values_and_dtypes(run):
    df = pd.DataFrame(
        {
            "sample": ["a", "b", "c", "d"],
            "layer": np.array([0, 1, 2, 3], dtype=np.int64),
            "value": np.array([0.5, np.nan, -1e-30, 1e30], dtype=np.float64),
            "value32": np.array([1, 2, 3, 4], dtype=np.float32),
            "ok": [True, False, True, True],
            "quadrant": pd.Categorical(["x", "y", "x", "z"]),
        }
    )
    path = write_table(run, "lens_layers", df)
    assert path == run.path / "tables" / "lens_layers.parquet"
    assert has_table(run, "lens_layers") and not has_table(run, "other")
    pd.testing.assert_frame_equal(read_table(run, "lens_layers"), df, check_exact=True)
    pd.testing.assert_frame_equal(read_table(run.path, "lens_layers"), df, check_exact=True)


def test_failed_table_write_leaves_nothing(run, monkeypatch):
    def broken(self, path, **kwargs):
        Path(path).write_bytes(b"PAR1 partial")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        write_table(run, "t", pd.DataFrame({"a": [1]}))
    assert list((run.path / "tables").iterdir()) == []


def test_missing_table_and_bad_input(run):
    with pytest.raises(InputError, match="does not exist"):
        read_table(run, "absent")
    with pytest.raises(InputError, match="DataFrame"):
        write_table(run, "t", {"a": [1]})
    with pytest.raises(InputError, match="name"):
        write_table(run, "../escape", pd.DataFrame({"a": [1]}))


def test_arrays_round_trip_and_refuse_objects(run):
    arrays = {
        "ig": np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32),  # [layers, heads]
        "mask": np.array([True, False]),
        "tokens": np.array(["a", "bb"]),
    }
    write_arrays(run, "heads", arrays)
    back = read_arrays(run, "heads")
    assert set(back) == set(arrays)
    for key, value in arrays.items():
        assert back[key].dtype == value.dtype
        np.testing.assert_array_equal(back[key], value)
    with pytest.raises(InputError, match="object"):
        write_arrays(run, "bad", {"x": np.array([{"a": 1}], dtype=object)})
    assert not (run.path / "arrays" / "bad.npz").exists()
