"""Bad input to ``patch path`` and ``steer sweep``: one line, exit code 2, nothing on disk
(the contract of ``test_bad_inputs``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from refusals import assert_refused

PAIR = {
    "id": "p0",
    "clean": "When Mary and John went to the store, John gave a drink to",
    "corrupt": "When Mary and John went to the store, Mary gave a drink to",
    "correct": " Mary",
    "wrong": " John",
}
M = ["-m", "tiny:llama"]
OUT = ["--out", "runs/x"]
PATH = ["patch", "path", "--pairs", "pairs.jsonl", *M, *OUT]
STEER = ["steer", "sweep", "--pairs", "contrast.jsonl", "--prompts", "prompts.jsonl", *M, *OUT]

CASES = {
    "path: unknown head": ([*PATH, "--senders", "1.9"], "1.9"),
    "path: head not layer.head": ([*PATH, "--senders", "7"], "layer.head"),
    "path: layer out of range": ([*PATH, "--receivers", "5.*"], "5.0"),
    "path: receivers below senders": ([*PATH, "--senders", "2.0", "--receivers", "1.*"], "above"),
    "path: a query head as a kv head": (
        [*PATH, "--receivers", "2.3", "--receiver-input", "k"],
        "key/value head 0..1",
    ),
    "path: unknown receiver input": ([*PATH, "--receiver-input", "z"], "--receiver-input"),
    "path: lengths differ": (
        ["patch", "path", "--pairs", "long.jsonl", *M, *OUT],
        "same token length",
    ),
    "path: clean equals corrupt": (["patch", "path", "--pairs", "same.jsonl", *M, *OUT], "differ"),
    "path: no pairs nor task": (["patch", "path", *M, *OUT], "pairs"),
    "steer: NaN alpha": ([*STEER, "--layer", "1", "--alphas", "nan,1"], "finite"),
    "steer: alphas not numbers": ([*STEER, "--layer", "1", "--alphas", "a,b"], "--alphas"),
    "steer: empty contrastive set": (
        [
            "steer",
            "sweep",
            "--pairs",
            "empty.jsonl",
            "--prompts",
            "prompts.jsonl",
            "--layer",
            "1",
            *M,
            *OUT,
        ],
        "contrastive pair",
    ),
    "steer: layer out of range": ([*STEER, "--layer", "9"], "9"),
    "steer: head on a residual site": ([*STEER, "--layer", "1", "--head", "0"], "head"),
    "steer: unknown mode": ([*STEER, "--layer", "1", "--mode", "scale"], "mode"),
    "steer: unknown site": ([*STEER, "--layer", "1", "--site", "pattern"], "site"),
    "steer: vector of the wrong shape": (
        [
            "steer",
            "sweep",
            "--vector",
            "v3.npy",
            "--prompts",
            "prompts.jsonl",
            "--layer",
            "1",
            *M,
            *OUT,
        ],
        "shape [64]",
    ),
    "steer: no prompts": (
        ["steer", "sweep", "--pairs", "contrast.jsonl", "--layer", "1", *M, *OUT],
        "--prompts",
    ),
    "steer: two sources": ([*STEER, "--layer", "1", "--task", "sentiment"], "exactly one"),
    "steer: unknown task": (
        ["steer", "sweep", "--task", "poetry", "--layer", "1", *M, *OUT],
        "poetry",
    ),
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "pairs.jsonl").write_text(json.dumps(PAIR) + "\n")
    longer = {
        **PAIR,
        "corrupt": "When Mary and John went to the big old store, Mary gave a drink to",
    }
    (tmp_path / "long.jsonl").write_text(json.dumps(longer) + "\n")
    (tmp_path / "same.jsonl").write_text(json.dumps({**PAIR, "corrupt": PAIR["clean"]}) + "\n")
    contrast = {"id": "c0", "positive": "The food was great", "negative": "The food was awful"}
    (tmp_path / "contrast.jsonl").write_text(json.dumps(contrast) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    prompt = {"id": "q0", "prompt": "When Mary and John went", "target": " Mary", "versus": " John"}
    (tmp_path / "prompts.jsonl").write_text(json.dumps(prompt) + "\n")
    np.save(tmp_path / "v3.npy", np.ones(3, dtype=np.float32))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, folder, capsys):
    argv, expected = CASES[case]
    assert_refused(argv, expected, folder, capsys)
