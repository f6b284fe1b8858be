"""A trial killed mid-training resumes from its checkpoint and ends where an uninterrupted
trial ends; the trainer's schedule and batches are pure functions of (seed, step)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml

from mechscope.distill.config import TrainSpec
from mechscope.distill.trainer import autocast_dtype, batch_indices, can_fuse, lr_multiplier
from mechscope.distill.trial import Trial, run_trial
from mechscope.runs import read_table
from tolerance import assert_fp64_close


class Killed(RuntimeError):
    pass


@pytest.mark.parametrize("method", ["rcid", pytest.param("fitnets", marks=pytest.mark.slow)])
def test_killed_trial_resumes_from_checkpoint(tiny_cfg, teacher, tmp_path, method):
    cfg = tiny_cfg(
        methods=[method],
        train={"steps": 6, "batch_size": 4, "checkpoint_every": 2, "keep_checkpoint": True},
    )
    trial = Trial(cfg.students[1], cfg.tasks[0], method, 0)

    def kill_after_3(step: int, _parts: dict) -> None:
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        run_trial(cfg, trial, tmp_path / "a", teacher=teacher, on_step=kill_after_3)
    folder = tmp_path / "a" / "trials" / trial.name
    assert (folder / "checkpoints" / "last.pt").is_file()
    assert not (folder / "tables" / "metrics.parquet").exists()
    state = torch.load(folder / "checkpoints" / "last.pt", weights_only=True)
    assert state["step"] == 2  # the step-3 checkpoint was never written

    calls = []
    resumed = run_trial(
        cfg, trial, tmp_path / "a", teacher=teacher, on_step=lambda s, _p: calls.append(s)
    )
    assert calls == [3, 4, 5, 6]  # steps 1-2 came from the checkpoint
    assert int(resumed["resumed_from"].iloc[0]) == 2

    fresh = run_trial(cfg, trial, tmp_path / "b", teacher=teacher)
    assert int(fresh["resumed_from"].iloc[0]) == 0
    for col in ("accuracy", "consistency", "perplexity"):
        np.testing.assert_array_equal(resumed[col].to_numpy(), fresh[col].to_numpy())
    log_a = read_table(folder, "train_log")
    log_b = read_table(tmp_path / "b" / "trials" / trial.name, "train_log")
    assert list(log_a["step"]) == [1, 2, 3, 4, 5, 6]
    np.testing.assert_array_equal(log_a["loss"].to_numpy(), log_b["loss"].to_numpy())

    again = run_trial(
        cfg,
        trial,
        tmp_path / "a",
        teacher=teacher,
        on_step=lambda *_: pytest.fail("a finished trial must not train again"),
    )
    assert again["trial"].iloc[0] == trial.name


def test_lr_schedule_warmup_then_cosine():
    total, warm = 10, 2
    lrs = [lr_multiplier(s, total, warm) for s in range(total)]
    assert lrs[:3] == [0.5, 1.0, 1.0]  # 1/2, 2/2 and 0.5·(1 + cos 0): exact in binary
    # math.cos against numpy's at π/2, then one float64 rounding at 1's scale
    assert_fp64_close(lrs[6], 0.5 * (1 + np.cos(np.pi * 4 / 8)), scale=1.0, msg="cosine")
    assert all(a >= b for a, b in itertools.pairwise(lrs[2:]))


def test_batches_deterministic_and_precision_on_cpu():
    a = batch_indices(20, 4, seed=1, step=7)
    assert torch.equal(a, batch_indices(20, 4, seed=1, step=7))
    assert len(set(a.tolist())) == 4
    assert not torch.equal(a, batch_indices(20, 4, seed=2, step=7))
    assert autocast_dtype("bf16", torch.device("cpu")) is None
    assert autocast_dtype("fp32", torch.device("cuda")) is None
    assert autocast_dtype("fp16", torch.device("cuda")) == torch.float16
    assert TrainSpec().precision == "auto"


def _cli(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MECHSCOPE_PROGRESS": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "mechscope.cli", "distill", "run", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
def test_sigkilled_study_resumes_from_checkpoint(tiny_raw, tmp_path):
    """A real kill (SIGKILL, no cleanup) of ``mechscope distill run`` mid-training: the
    rerun continues from the last checkpoint and ends with a fresh run's numbers."""
    raw = tiny_raw(
        methods=["rcid"],
        students=[tiny_raw()["students"][1]],
        train={"steps": 150, "batch_size": 4, "checkpoint_every": 5},
    )
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(raw))
    name = "nar-ioi-rcid-s0"
    ckpt = tmp_path / "a" / "tiny" / "trials" / name / "checkpoints" / "last.pt"
    proc = _cli([str(config), "--root", str(tmp_path / "a")])
    deadline = time.monotonic() + 120
    while not ckpt.is_file():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint written in 120 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = int(torch.load(ckpt, weights_only=True)["step"])
    assert 5 <= step < 150
    trial = tmp_path / "a" / "tiny" / "trials" / name
    assert not (trial / "tables" / "metrics.parquet").exists()

    for root in ("a", "b"):  # resume the killed study; run an uninterrupted one
        proc = _cli([str(config), "--root", str(tmp_path / root)])
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    resumed = read_table(trial, "metrics")
    fresh = read_table(tmp_path / "b" / "tiny" / "trials" / name, "metrics")
    assert int(resumed["resumed_from"].iloc[0]) >= step  # later checkpoints may exist
    assert int(fresh["resumed_from"].iloc[0]) == 0
    for col in ("accuracy", "consistency", "perplexity"):
        np.testing.assert_array_equal(resumed[col].to_numpy(), fresh[col].to_numpy())
    log_a = read_table(trial, "train_log")
    log_b = read_table(tmp_path / "b" / "tiny" / "trials" / name, "train_log")
    assert list(log_a["step"]) == list(range(1, 151))
    np.testing.assert_array_equal(log_a["loss"].to_numpy(), log_b["loss"].to_numpy())


def test_fused_adamw_only_where_it_applies():
    w = torch.nn.Parameter(torch.zeros(3))
    assert can_fuse([w, torch.nn.Parameter(torch.zeros(2, 2))])
    assert not can_fuse([])
    assert not can_fuse(
        [torch.nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False)]
    )
    assert not can_fuse([w, torch.nn.Parameter(torch.zeros(2, device="meta"))])
