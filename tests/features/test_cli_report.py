"""The commands end to end on the tiny model: ``features train`` trains, evaluates and
explains into one run whose report has the section and its searchable dashboards;
``features eval`` evaluates a run's dictionaries elsewhere; each result reopens from the
run directory without a model, and a bad option is one line."""

from __future__ import annotations

import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.features.result import EvalResult, ExplainResult, TrainingResult
from mechscope.runs.result import load_result, save_result
from tolerance import assert_exact

TINY = ["--model", "tiny:llama", "--context", "16", "--seed", "0"]


def _run(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        run_app(app, args)
        raise SystemExit(0)
    return int(info.value.code or 0), capsys.readouterr().err


def test_train_eval_explain_and_the_report(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    code, err = _run(
        ["features", "train", "--out", str(out), "--layers", "0,1", "--width", "32", "--k", "4",
         "--tokens", "600", "--batch", "200", "--buffer", "400", "--n-eval", "3", *TINY],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    html = (out / "report.html").read_text()
    assert 'id="features"' in html and "search features" in html
    for cls, part in ((TrainingResult, "features_train"), (EvalResult, "features_eval"),
                      (ExplainResult, "features_explain")):  # fmt: skip
        result = cls.from_run(out)
        save_result(tmp_path / "copy", part, result)
        back = load_result(tmp_path / "copy", part, cls)
        assert back.to_frame().equals(result.to_frame())
    ev = EvalResult.from_run(out)
    assert set(ev.table()["name"]) == {"resid_post.0", "resid_post.1"}
    assert (out / "neuronpedia" / "resid_post.0.json").is_file()
    again = tmp_path / "again"
    code, err = _run(["features", "eval", str(out), "--out", str(again), "--n-eval", "3", *TINY],
                     capsys)  # fmt: skip
    assert code == 0, err
    assert_exact(
        EvalResult.from_run(again).metrics["value"].to_numpy(), ev.metrics["value"].to_numpy()
    )


def test_a_bad_option_is_one_line(tmp_path, capsys) -> None:
    code, err = _run(
        ["features", "train", "--out", str(tmp_path / "r"), "--layers", "0", "--kind",
         "transcoder", "--site", "resid_post", "--site-out", "resid_post", *TINY],
        capsys,
    )  # fmt: skip
    assert code == 2 and "writes another site" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
