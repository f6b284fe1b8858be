"""The seed's two audio experiments from the command line on the tiny audio model: the
espeak-ng demo set, ``lens candidates`` (win-rate and margin per layer) and ``patch run
--span audio`` (flip rates and Δ logit per layer), each with its figures in the report."""

from __future__ import annotations

import numpy as np

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.data.speech_demo import espeak_path
from mechscope.runs import RunDir, read_table

MODEL = ["-m", "tiny:qwen2_audio"]


def _run(argv: list[str]) -> None:
    try:
        run_app(app, argv)
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code


def test_speech_demo_command_writes_the_set(tmp_path):
    import pytest

    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/install_espeak.sh installs it)")
    _run(["media", "speech-demo", "--out", str(tmp_path / "set")])
    assert len((tmp_path / "set" / "samples.jsonl").read_text().splitlines()) == 25
    assert len(list((tmp_path / "set" / "audio").glob("*.wav"))) == 25


def test_lens_candidates_on_speech(speech_dir, tmp_path):
    out = tmp_path / "lens"
    _run(["lens", "candidates", str(speech_dir / "samples.jsonl"), *MODEL, "--out", str(out)])
    _run(["lens", "candidates", str(speech_dir / "samples.jsonl"), *MODEL, "--out", str(out)])
    run = RunDir.open(out)
    curves = read_table(run, "lens_candidates_curves")
    assert set(curves["metric"]) >= {"win_a", "win_b", "win_other", "margin"}
    assert sorted(curves["layer"].unique()) == [0, 1, 2]
    html = (out / "report.html").read_text()
    assert "Which candidate wins at each layer" in html
    assert "Margin between the two labels per layer" in html


def test_patch_run_span_audio(speech_dir, tmp_path):
    pairs = tmp_path / "pairs.jsonl"  # six pairs keep it quick; paths relative to the set
    lines = (speech_dir / "pairs_prosody.jsonl").read_text().splitlines()[:6]
    pairs.write_text("\n".join(lines).replace('"audio/', f'"{speech_dir}/audio/') + "\n")
    out = tmp_path / "patch"
    argv = ["patch", "run", "--pairs", str(pairs), "--granularity", "span", "--span", "audio"]
    _run([*argv, "--span-policy", "pad", "--policy", "first", *MODEL, "--out", str(out)])
    table = read_table(RunDir.open(out), "patching")
    assert set(table["unit"]) == {"audio"} and sorted(table["layer"].unique()) == [0, 1, 2]
    for metric in ("flip_to_target", "flip_from_base", "delta_logit"):
        assert np.isfinite(table[metric]).all()
    assert table["flip_to_target"].isin([0.0, 1.0]).all()
    html = (out / "report.html").read_text()
    assert "flip_to_target" in html and "\\u0394 logit of the target" in html


def test_the_python_example_of_the_docs_runs(speech_dir, tmp_path, monkeypatch):
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "multimodal.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code.replace("runs/speech/", f"{speech_dir}/"), "docs", "exec"), {})
