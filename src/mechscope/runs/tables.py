"""Results as data: long-format tables (Parquet) and dense arrays (npz) in a run directory.

Parquet keeps column types (categories, ints with NaN-free columns, strings) and is
read by pandas, polars, DuckDB and R alike, so results outlive the code that made
them. Arrays go to ``.npz`` read with ``allow_pickle=False``: opening a result never
executes code. Tables are written with page checksums and both kinds are verified when
read: a damaged file is a one-line :class:`~mechscope.errors.DamagedFileError` naming it
(:mod:`mechscope.runs.integrity`), never a traceback or a wrong number.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from mechscope.errors import DamagedFileError, InputError
from mechscope.runs.atomic import atomic_path
from mechscope.runs.integrity import REBUILD, Damaged, load_npz, read_parquet, table_problem
from mechscope.runs.rundir import RunDir, check_name


def _run_path(run: RunDir | Path | str) -> Path:
    return run.path if isinstance(run, RunDir) else Path(run)


def table_path(run: RunDir | Path | str, name: str) -> Path:
    """Where table ``name`` lives: ``tables/<name>.parquet``."""
    return _run_path(run) / "tables" / f"{check_name(name, field='table')}.parquet"


def arrays_path(run: RunDir | Path | str, name: str) -> Path:
    """Where array bundle ``name`` lives: ``arrays/<name>.npz``."""
    return _run_path(run) / "arrays" / f"{check_name(name, field='arrays')}.npz"


def write_table(run: RunDir | Path | str, name: str, df: pd.DataFrame) -> Path:
    """Write ``df`` to ``tables/<name>.parquet`` atomically (pyarrow); returns the path."""
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"a pandas DataFrame, got {type(df).__name__}", field=name)
    path = table_path(run, name)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, engine="pyarrow", write_page_checksum=True)
    return path


def has_table(run: RunDir | Path | str, name: str) -> bool:
    """Whether table ``name`` was written (report sections use it to skip absent results)."""
    return table_path(run, name).is_file()


def table_intact(run: RunDir | Path | str, name: str) -> bool:
    """Whether table ``name`` exists and reads back whole (every page's checksum): for a
    table that marks work as done, so a damaged one makes the work run again."""
    path = table_path(run, name)
    return path.is_file() and table_problem(path) is None


def read_table(run: RunDir | Path | str, name: str) -> pd.DataFrame:
    """Read table ``name``; :class:`InputError` naming the path if it does not exist,
    :class:`DamagedFileError` if it cannot be read back whole."""
    path = table_path(run, name)
    if not path.is_file():
        raise InputError(f"a table at {path}; it does not exist", field=name)
    try:
        return read_parquet(path)
    except Damaged as why:
        raise DamagedFileError(path, str(why), REBUILD) from None


def write_arrays(run: RunDir | Path | str, name: str, arrays: Mapping[str, np.ndarray]) -> Path:
    """Write named arrays to ``arrays/<name>.npz`` atomically; returns the path.

    Object arrays are refused: they would need pickle to read back.
    """
    clean: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise InputError(f"array names that are non-empty strings without '/', got {key!r}")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise InputError(
                "a numeric, bool or string array (object arrays need pickle)", field=key
            )
        clean[key] = arr
    path = arrays_path(run, name)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **clean)
    return path


def has_arrays(run: RunDir | Path | str, name: str) -> bool:
    """Whether array bundle ``name`` was written."""
    return arrays_path(run, name).is_file()


def read_arrays(run: RunDir | Path | str, name: str) -> dict[str, np.ndarray]:
    """Read every array of bundle ``name`` into memory (the file is closed on return)."""
    path = arrays_path(run, name)
    if not path.is_file():
        raise InputError(f"an array bundle at {path}; it does not exist", field=name)
    try:
        return load_npz(path)
    except Damaged as why:
        raise DamagedFileError(path, str(why), REBUILD) from None
