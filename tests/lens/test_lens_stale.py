"""A rerun recomputes exactly the samples whose content changed, and drops removed ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
from lens_helpers import sample_record

from mechscope.lens.config import DiffConfig
from mechscope.lens.layout import TABLES
from mechscope.lens.run import run_diff
from mechscope.lens.samples import parse_sample
from mechscope.runs import RunDir, read_table


def samples(edit: bool = False):
    recs = [sample_record(f"s{i}") for i in range(3)]
    for i, r in enumerate(recs):
        r["continuation"] = f"def f{i}(x):\n    return x + {i}\n"
    if edit:
        recs[1]["continuation"] = "def g(y):\n    return y * 7\n"
    return [parse_sample(r, "t") for r in recs]


def test_edited_sample_is_recomputed_and_tables_match_a_fresh_run(tiny, tmp_path, monkeypatch):
    from mechscope.lens import run as lens_run

    config = DiffConfig(contrast=("a", "b"), n_resamples=50, n_bins=4)
    run_diff(RunDir.create(tmp_path, "r", config), tiny, samples(), config, progress=False)
    analysed: list[str] = []
    real = lens_run.analyse_sample
    monkeypatch.setattr(
        lens_run, "analyse_sample", lambda e, p, o: analysed.append(p.id) or real(e, p, o)
    )
    run = RunDir.create(tmp_path, "r", config)
    resumed = run_diff(run, tiny, samples(edit=True)[:2], config, progress=False)  # s2 removed
    assert analysed == ["s1"]
    fresh_run = RunDir.create(tmp_path, "fresh", config)
    fresh = run_diff(fresh_run, tiny, samples(edit=True)[:2], config, progress=False)
    for a, b in zip(resumed.samples, fresh.samples, strict=True):
        np.testing.assert_array_equal(a.metrics, b.metrics)
    for name in TABLES.values():
        if (run.tables_dir / f"{name}.parquet").is_file():
            pd.testing.assert_frame_equal(read_table(run, name), read_table(fresh_run, name))
    assert set(read_table(run, TABLES["samples"])["sample"]) == {"s0", "s1"}
