"""Trials on the shared executor: ``mechscope distill run --executor local --workers 2``
gives the tables of an inline run, trains each trial once, and a rerun retrains none."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.distill.config import parse_study_config
from mechscope.distill.run import expand_trials


def _tables(folder: Path) -> dict[str, pd.DataFrame]:
    """Every table of a study (its own and its trials'), keyed by path inside the study."""
    return {
        str(p.relative_to(folder)): pd.read_parquet(p)
        for p in sorted(folder.rglob("tables/*.parquet"))
        if not p.stem.endswith("timings")
    }


def _same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        drop = [c for c in a[name].columns if "seconds" in c]  # wall and CPU time
        pd.testing.assert_frame_equal(
            a[name].drop(columns=drop), b[name].drop(columns=drop), atol=1e-5, obj=name
        )


@pytest.mark.slow
def test_two_workers_match_inline(tmp_path, tiny_raw, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = tiny_raw(methods=["standard_kd", "rcid"], students=[tiny_raw()["students"][1]])
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(raw))
    argv = ["distill", "run", str(config)]
    assert run_app(app, [*argv, "--root", "inline"]) in (None, 0)
    assert run_app(app, [*argv, "--root", "par", "--executor", "local", "--workers", "2"]) in (
        None,
        0,
    )
    study = tmp_path / "par" / raw["name"]
    _same(_tables(tmp_path / "inline" / raw["name"]), _tables(study))
    names = sorted(t.name for t in expand_trials(parse_study_config(raw)))
    assert sorted(p.name for p in (study / "trials").iterdir()) == names
    for name in names:  # each trial created once, by one process, and never reopened
        manifest = json.loads((study / "trials" / name / "manifest.json").read_text())
        assert manifest["status"] == "finished" and not manifest.get("resumed")
    assert not list(study.rglob("*.claim"))
    assert json.loads((study / "manifest.json").read_text())["status"] == "finished"

    metrics = {n: (study / "trials" / n / "tables" / "metrics.parquet") for n in names}
    before = {n: p.stat().st_mtime_ns for n, p in metrics.items()}
    assert run_app(app, [*argv, "--root", "par", "--executor", "local", "--workers", "2"]) in (
        None,
        0,
    )
    assert {n: p.stat().st_mtime_ns for n, p in metrics.items()} == before  # none retrained
