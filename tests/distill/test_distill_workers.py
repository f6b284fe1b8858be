"""Local parallel trials: two worker processes give the results of a sequential run and
skip finished trials."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.distill.config import parse_study_config
from mechscope.distill.study import expand_trials, run_study

COLUMNS = ["accuracy", "consistency", "perplexity", "mean_delta_student"]


@pytest.mark.slow
def test_two_workers_match_sequential(tmp_path, teacher, tiny_raw, monkeypatch):
    raw = tiny_raw(methods=["standard_kd", "rcid"], students=[tiny_raw()["students"][1]])
    cfg = parse_study_config(raw)
    seq = []
    run_study(cfg, tmp_path / "seq", teacher=teacher, on_trial=lambda t, df: seq.append(df))
    par = []
    study = run_study(cfg, tmp_path / "par", workers=2, on_trial=lambda t, df: par.append(df))
    names = sorted(t.name for t in expand_trials(cfg))
    assert sorted(df["trial"].iloc[0] for df in par) == names
    a = {df["trial"].iloc[0]: df for df in seq}
    b = {df["trial"].iloc[0]: df for df in par}
    for name in names:  # one thread per worker here and in the test process: same numbers
        np.testing.assert_allclose(
            a[name][COLUMNS].to_numpy(float), b[name][COLUMNS].to_numpy(float), atol=1e-5
        )
    from mechscope.distill import workers

    def no_workers(*_a, **_k):
        raise AssertionError("a finished trial was sent to a worker")

    monkeypatch.setattr(workers, "run_parallel", no_workers)
    again = []
    run_study(cfg, tmp_path / "par", workers=2, on_trial=lambda t, df: again.append(t.name))
    assert sorted(again) == names  # finished trials are read back, none retrained
    assert study.manifest["status"] == "finished"
