"""Running ``mechscope demo`` as a user would, and comparing what two runs saved."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def is_time_column(name: object) -> bool:
    """Wall or CPU times (``seconds``, ``train_seconds``, ``seconds_decode`` ...), and where an
    interrupted training resumed (``resumed_from``, its step): bookkeeping that differs
    between two runs, not results, so results are compared without them."""
    return "seconds" in str(name).split("_") or str(name) == "resumed_from"


def demo_command(out: Path, model: Path | str, parts: list[str] | tuple[str, ...] = ()) -> list:
    """``mechscope demo --quick --model MODEL --out OUT [--only P ...]``."""
    script = Path(sys.executable).with_name("mechscope")  # the installed command, if any
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "mechscope.cli"]
    cmd += ["demo", "--quick", "--model", str(model), "--out", str(out)]
    return cmd + [arg for p in parts for arg in ("--only", p)]


def demo_env() -> dict[str, str]:
    """Offline, no progress bars, one thread (two pytest workers share two cores)."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return env | {"MECHSCOPE_PROGRESS": "0", "OMP_NUM_THREADS": "1"}


def saved_results(run: Path) -> dict[str, object]:
    """Every table (without timing columns) and array a run saved, by relative path.

    Tables and arrays are what figures and reports are made from; two runs with the same
    results here give the same report, up to the header's dates and times.
    """
    out: dict[str, object] = {}
    for path in sorted(run.rglob("*.parquet")):
        if "shards" in path.relative_to(run).parts:
            continue
        df = pd.read_parquet(path)
        times = [c for c in df.columns if is_time_column(c)]
        out[str(path.relative_to(run))] = df.drop(columns=times)
    for path in sorted(run.rglob("*.npz")):
        if "shards" in path.relative_to(run).parts:
            continue
        with np.load(path, allow_pickle=False) as data:
            out[str(path.relative_to(run))] = {k: data[k] for k in data.files}
    return out


def differences(a: dict[str, object], b: dict[str, object]) -> list[str]:
    """Where two :func:`saved_results` differ (``[]`` when they are the same), bit for bit:
    a resumed part recomputes whole units (a sample, a group of pairs, a trial) exactly as
    an uninterrupted run does on the same machine, so nothing may move, not even by
    rounding."""
    diffs = [f"only in one run: {k}" for k in sorted(set(a) ^ set(b))]
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if isinstance(x, pd.DataFrame):
            try:
                pd.testing.assert_frame_equal(x, y, check_exact=True)
            except AssertionError as exc:
                diffs.append(f"{key}: {str(exc).splitlines()[0]}")
        else:
            if set(x) != set(y):
                diffs.append(f"{key}: arrays {sorted(x)} vs {sorted(y)}")
                continue
            for name in x:
                if not _same_array(x[name], y[name]):
                    diffs.append(f"{key}[{name}] differs")
    return diffs


def _same_array(x: np.ndarray, y: np.ndarray) -> bool:
    if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
        return False
    if x.dtype.kind in "fc":
        return bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))
