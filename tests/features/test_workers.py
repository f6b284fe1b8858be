"""Training on the executor: ``features train --executor local --workers 1`` splits the
layers between this process and a worker, each training its group on its own stream, and
ends with the inline run's dictionaries, bit for bit (one thread each: the same kernels)."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.features.result import TrainingResult
from tolerance import assert_exact

ARGS = ["features", "train", "--layers", "0,1", "--width", "16", "--k", "2", "--tokens", "400",
        "--batch", "100", "--buffer", "200", "--context", "16", "--n-eval", "2", "--no-eval",
        "--no-explain", "--model", "tiny:llama", "--threads", "1"]  # fmt: skip


@pytest.mark.slow
def test_a_local_worker_trains_what_the_inline_run_trains(tmp_path) -> None:
    assert run_app(app, [*ARGS, "--out", str(tmp_path / "inline")]) in (None, 0)
    par = tmp_path / "par"
    workers = ["--executor", "local", "--workers", "1"]
    assert run_app(app, [*ARGS, "--out", str(par), *workers]) in (None, 0)
    groups = set(TrainingResult.from_run(par).timing["group"])
    assert groups == {"resid_post.0", "resid_post.1"}  # one dictionary per process
    for name in ("resid_post.0", "resid_post.1"):
        a = load_file(str(tmp_path / "inline" / "dictionaries" / name / "sae_weights.safetensors"))
        b = load_file(str(par / "dictionaries" / name / "sae_weights.safetensors"))
        for key in a:
            assert_exact(b[key], a[key], msg=f"{name} {key}")
