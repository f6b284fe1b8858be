"""Damaged model directories: one ModelSpecError naming the path and the fix, no traceback.

Each case starts from a tiny model saved with ``save_pretrained`` and breaks one thing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.errors import ModelSpecError
from mechscope.models import load_model

TOKENIZER_PREFIXES = ("tokenizer", "special_tokens", "vocab", "merges", "chat_template")


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "tiny"
    lm = load_model("tiny:llama")
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return path


def _truncate(d: Path) -> Path:
    weights = d / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return weights


def _garbage(d: Path) -> Path:
    weights = d / "model.safetensors"
    weights.write_bytes(os.urandom(weights.stat().st_size))
    return weights


def _no_tokenizer(d: Path) -> Path:
    for f in d.iterdir():
        if f.name.startswith(TOKENIZER_PREFIXES):
            f.unlink()
    return d


def _no_vocabulary(d: Path) -> Path:
    """tokenizer_config.json is still there, but no file holds the vocabulary."""
    (d / "tokenizer.json").unlink()
    return d


def _config_not_json(d: Path) -> Path:
    (d / "config.json").write_text('{"model_type": "llama", "hidden_size": 64,,')
    return d / "config.json"


def _unknown_model_type(d: Path) -> Path:
    config = json.loads((d / "config.json").read_text())
    config["model_type"] = "brand_new_lm"
    (d / "config.json").write_text(json.dumps(config))
    return d / "config.json"


#: name -> (how to damage a copy of the saved model, words the message must contain,
#: the type of the original exception kept as __cause__)
CASES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...], str]] = {
    "truncated": (
        _truncate,
        ("not a valid safetensors file", "truncated", "re-download or re-convert"),
        "SafetensorError",
    ),
    "garbage": (
        _garbage,
        ("not a valid safetensors file", "corrupt", "re-download or re-convert"),
        "SafetensorError",
    ),
    "no_tokenizer": (_no_tokenizer, ("no tokenizer files", "tokenizer.json"), "ValueError"),
    "no_vocabulary": (_no_vocabulary, ("no tokenizer files", "tokenizer.json"), "ValueError"),
    "config_not_json": (_config_not_json, ("is not valid JSON", "line 1"), "JSONDecodeError"),
    "unknown_model_type": (
        _unknown_model_type,
        ("model_type 'brand_new_lm'", "transformers", "does not know"),
        "ValueError",
    ),
}


def _damaged(saved_model: Path, tmp_path: Path, case: str) -> tuple[Path, Path]:
    """A damaged copy: (model directory, the path the message must name)."""
    d = tmp_path / case
    shutil.copytree(saved_model, d)
    return d, CASES[case][0](d)


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_model_is_one_model_spec_error(saved_model, tmp_path, case) -> None:
    d, culprit = _damaged(saved_model, tmp_path, case)
    with pytest.raises(ModelSpecError) as info:
        load_model(str(d))
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert str(culprit) in message
    for words in CASES[case][1]:
        assert words in message, message
    assert info.value.__cause__ is not None  # the original error, for --debug
    assert CASES[case][2] in _chain_types(info.value)


def _chain_types(exc: BaseException) -> set[str]:
    """Names of the types (and their bases) of every exception that led to ``exc``."""
    names: set[str] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        names.update(t.__name__ for t in type(cause).__mro__)
        cause = cause.__cause__ or cause.__context__
    return names


def test_truncated_message_gives_the_sizes(saved_model, tmp_path) -> None:
    d, weights = _damaged(saved_model, tmp_path, "truncated")
    full = (saved_model / "model.safetensors").stat().st_size
    with pytest.raises(ModelSpecError) as info:
        load_model(str(d))
    assert f"{weights.stat().st_size:,} of {full:,} bytes" in str(info.value)


def test_intact_copy_still_loads(saved_model, tmp_path) -> None:
    """The damage, not the copying, is what the cases above detect."""
    d = tmp_path / "intact"
    shutil.copytree(saved_model, d)
    assert load_model(str(d)).card.family == "llama"


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_inspect_damaged_is_one_line_exit_2(saved_model, tmp_path, case, capsys) -> None:
    d, culprit = _damaged(saved_model, tmp_path, case)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        run_app(app, ["inspect", "-m", str(d)])
    err = capsys.readouterr().err
    assert info.value.code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(culprit) in lines[0], err


def test_cli_subprocess_truncated_is_one_line_exit_2(saved_model, tmp_path) -> None:
    """The installed entry point, in its own process: exit 2 and exactly one stderr line."""
    d, weights = _damaged(saved_model, tmp_path, "truncated")
    proc = subprocess.run(
        [sys.executable, "-m", "mechscope.cli", "inspect", "-m", str(d)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: ")
    assert str(weights) in proc.stderr and "Traceback" not in proc.stderr
