"""``mechscope graph PROMPT -m MODEL --transcoders DIR`` on a tiny model: the run directory
with circuit-tracer's graph files and a QK attribution's tables, its resume, and bad input
refused in one line before any run directory exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transcoder_sets import random_transcoder, transcoder_set, write_circuit_tracer
from typer.testing import CliRunner

from mechscope.cli.main import app
from mechscope.models import load_model
from mechscope.runs.tables import read_table
from refusals import assert_refused
from tolerance import assert_rounding_close

PROMPT = "The cat sat on the"


@pytest.fixture(scope="module")
def transcoders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tc") / "set"
    transcoder_set(load_model("tiny:llama"), folder, layout="circuit_tracer")
    return folder


def test_a_graph_run_writes_circuit_tracers_files_and_resumes(transcoders, tmp_path) -> None:
    out = tmp_path / "run"
    argv = ["graph", PROMPT, "-m", "tiny:llama", "--transcoders", str(transcoders),
            "--out", str(out), "--max-logits", "3", "--slug", "cat",
            "--qk", "2.1:-1,2"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "graph" / "cat.json").read_text())
    assert data["metadata"]["prompt"] == PROMPT and data["metadata"]["scan"] == "tiny:llama"
    assert len([n for n in data["nodes"] if n["feature_type"] == "logit"]) == 3
    index = json.loads((out / "graph" / "graph-metadata.json").read_text())
    assert [g["slug"] for g in index["graphs"]] == ["cat"]
    summary = json.loads((out / "graph" / "summary.json").read_text())
    assert 0 < summary["replacement_score"] <= 1 and 0 < summary["completeness_score"] <= 1
    assert (out / "tables" / "graph_nodes.parquet").exists()
    (qk,) = json.loads((out / "graph" / "qk.json").read_text())
    last = len(load_model("tiny:llama").to_str_tokens(PROMPT, prepend_bos=True)) - 1
    assert (qk["layer"], qk["head"], qk["query"], qk["key"]) == (2, 1, last, 2)
    nodes = read_table(out, f"qk_L2_H1_{last}_2")
    assert nodes["kind"].iloc[-1] == "constant" and len(read_table(out, qk["table"] + "_pairs"))
    assert_rounding_close(nodes["via_q"].sum(), qk["score"], scale=nodes["via_q"].abs().sum(),
                          depth=2 * 3, msg="through q")  # fmt: skip
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Attribution graph" in html and "Replacement score" in html
    assert "QK attribution" in html and "through the key" in html
    before = (out / "graph" / "cat.json").read_text()
    again = CliRunner().invoke(app, argv)
    assert again.exit_code == 0, again.output
    assert (out / "graph" / "cat.json").read_text() == before


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--transcoders", "{missing}"], "a folder holding a dictionary"),
        (["--transcoders", "{empty}"], "the files of one layout"),
        (["--transcoders", "{set}", "--slug", "a/b"], "slug"),
        (["--transcoders", "{two_layers}"], "a transcoder for every layer 0..2"),
        (["--transcoders", "{narrow}"], "the model's width 64, got 32"),
        (["--transcoders", "{set}", "-m", "tiny:opt"], "an attribution graph of tiny:opt"),
        (["--transcoders", "{set}", "--max-logits", "0"], "--max-logits"),
        (["--transcoders", "{set}", "--logit-prob", "0"], "--logit-prob"),
        (["--transcoders", "{set}", "--qk", "2.4:3,1"], "a head in 0..3, got 4"),
        (["--transcoders", "{set}", "--qk", "2.1:1,3"], "a key at or before its query"),
        (["--transcoders", "{set}", "--qk", "2.1:-1,99"], "positions in 0.."),
        (["--transcoders", "{set}", "--qk", "2:1,0"], "a score as LAYER.HEAD:QPOS,KPOS"),
    ],
)
def test_bad_input_is_refused_before_the_run(
    transcoders, tmp_path, monkeypatch, capsys, extra, expected
) -> None:
    (tmp_path / "empty").mkdir()
    places = {"missing": tmp_path / "nowhere", "empty": tmp_path / "empty", "set": transcoders}
    for name, width, n_layers in (("two_layers", 64, 2), ("narrow", 32, 3)):
        members = [random_transcoder(width, i, skip=False, jumprelu=False, seed=1)
                   for i in range(n_layers)]  # fmt: skip
        places[name] = write_circuit_tracer(members, tmp_path / name, model_name="tiny")
    monkeypatch.chdir(tmp_path)
    extra = [x.format(**places) for x in extra]
    argv = ["graph", PROMPT, "-m", "tiny:llama", "--out", str(tmp_path / "run"), *extra]
    assert_refused(argv, expected, tmp_path, capsys)
