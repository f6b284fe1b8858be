"""Executors: more processes running the same command on one run directory.

Real command lines (in process, as the CLI runs them) with ``--executor local`` (worker
processes) and ``--executor ray`` (a local Ray cluster on 127.0.0.1) must give tables
identical to the inline run, for patching, the paired lens, head IG and resampling; a
worker killed mid-unit leaves its claim, which is taken over, and every pair is written
once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.errors import InputError
from mechscope.runs.executor import MAX_WORKERS, check_executor, local_gpu, worker_argv

PLACES = ["store", "park", "school", "market", "house", "garden", "city", "river"]


def _pairs(folder: Path) -> Path:
    path = folder / "pairs.jsonl"
    with path.open("w") as fh:
        for i, place in enumerate(PLACES):
            clean = f"When Mary and John went to the {place}, John gave a drink to"
            corrupt = clean.replace(", John gave", ", Mary gave")
            rec = {"id": f"p{i}", "clean": clean, "corrupt": corrupt, "correct": " Mary"}
            fh.write(json.dumps({**rec, "wrong": " John"}) + "\n")
    return path


def _lens_samples(folder: Path) -> Path:
    path = folder / "lens.jsonl"
    with path.open("w") as fh:
        for i, place in enumerate(PLACES[:4]):
            fh.write(json.dumps({
                "id": f"s{i}",
                "continuation": f" they walked to the {place} together",
                "conditions": {"a": {"prompt": "Mary and John."}, "b": {"prompt": "Mary."}},
            }) + "\n")  # fmt: skip
    return path


def _heads_samples(folder: Path) -> Path:
    path = folder / "heads.jsonl"
    with path.open("w") as fh:
        for i, place in enumerate(PLACES[:3]):
            rec = {"id": f"h{i}", "prompt": f"Mary went to the {place}", "completion": " and"}
            fh.write(json.dumps(rec) + "\n")
    return path


def _trace(folder: Path) -> Path:
    text = (
        "Question: Tom has 3 apples and buys 5 more. How many?\n<think>\n"
        "Let me think step by step. Tom starts with 3 apples. He buys 5 more apples. "
        "So 3 + 5 = 8 apples in total. Therefore, the answer is 8.\n</think>\n\n\\boxed{8}"
    )
    path = folder / "trace.json"
    path.write_text(json.dumps([{"id": "t0", "text": text, "gold": "8"}]))
    return path


RESAMPLE = ["--n", "2", "--max-new-tokens", "4"]
COMMANDS = {
    "patch run": lambda d: ["patch", "run", "--pairs", str(_pairs(d)), "--policy", "first"],
    "lens diff": lambda d: ["lens", "diff", str(_lens_samples(d)), "--contrast", "a-b"],
    "heads run": lambda d: ["heads", "run", str(_heads_samples(d)), "--steps", "4"],
    "anchors resample": lambda d: ["anchors", "resample", str(_trace(d)), *RESAMPLE],
}


def _run(argv: list[str]) -> None:
    assert run_app(app, argv) in (None, 0)


def _tables(run: Path) -> dict[str, pd.DataFrame]:
    return {p.stem: pd.read_parquet(p) for p in sorted((run / "tables").glob("*.parquet"))}


def _same_tables(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    assert ta.keys() == tb.keys() and ta
    for name in ta:
        if name.endswith("timings"):
            continue  # seconds differ from run to run
        # wall time of a sample; when a command started (anchors_backend)
        timing = [c for c in ta[name].columns if c in ("seconds", "started")]
        pd.testing.assert_frame_equal(
            ta[name].drop(columns=timing), tb[name].drop(columns=timing), obj=name
        )


def test_worker_command_line_runs_inline():
    argv = ["patch", "run", "--executor", "local", "--workers=3", "--out", "x", "--address", "a"]
    assert worker_argv(argv) == ["patch", "run", "--out", "x", "--executor", "inline"]


def test_worker_gpu_options_are_stripped_and_checked():
    argv = ["heads", "run", "s.jsonl", "--worker-gpus", "1", "--executor", "local"]
    assert worker_argv(argv) == ["heads", "run", "s.jsonl", "--executor", "inline"]
    with pytest.raises(InputError, match="only with --executor local or ray"):
        check_executor("inline", 2, None, 1)
    with pytest.raises(InputError, match="fractions and several need ray"):
        check_executor("local", 2, None, 0.5)
    with pytest.raises(InputError, match=">= 0 GPUs"):
        check_executor("ray", 2, None, -1)


def test_local_workers_get_their_own_gpu_round_robin():
    gpus = ["0", "1", "2"]  # this process uses the first; workers the next ones
    seen = [local_gpu(i, 1, gpus)["CUDA_VISIBLE_DEVICES"] for i in range(4)]
    assert seen == ["1", "2", "0", "1"]
    assert local_gpu(0, 0, gpus) == {} and local_gpu(0, 1, []) == {}


def test_bad_executor_options_are_input_errors():
    with pytest.raises(InputError, match="one of inline, local, ray"):
        check_executor("threads", 2, None)
    with pytest.raises(InputError, match=f"0 to {MAX_WORKERS} worker processes"):
        check_executor("local", -1, None)
    with pytest.raises(InputError, match="only with --executor ray"):
        check_executor("local", 2, "ray://x:10001")


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_local_workers_give_the_inline_tables(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [*COMMANDS[command](tmp_path), "--model", "tiny:llama"]
    _run([*argv, "--out", "inline"])
    _run([*argv, "--out", "local", "--executor", "local", "--workers", "2"])
    _same_tables(tmp_path / "inline", tmp_path / "local")
    assert not list((tmp_path / "local").rglob("*.claim"))


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ray_workers_give_the_inline_tables(command, tmp_path, monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    argv = [*COMMANDS[command](tmp_path), "--model", "tiny:llama"]
    _run([*argv, "--out", "inline"])
    try:
        _run([*argv, "--out", "ray", "--executor", "ray", "--workers", "2"])
    finally:
        ray.shutdown()
    assert "ray worker" not in capsys.readouterr().err  # no task failed after its retries
    _same_tables(tmp_path / "inline", tmp_path / "ray")


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_and_duplicates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [*COMMANDS["patch run"](tmp_path), "--model", "tiny:llama", "--policy", "first"]
    _run([*argv, "--out", "inline"])
    shards = tmp_path / "killed" / "shards" / "patching"
    env = {**os.environ, "MECHSCOPE_PROGRESS": "0", "MECHSCOPE_WORKER": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "mechscope.cli", *argv, "--out", "killed"], env=env
    )
    deadline = time.monotonic() + 120
    while not list(shards.glob("*.claim")) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)  # mid-group, its claim left behind
    worker.wait()
    assert list(shards.glob("*.claim")), "the worker should have died holding a claim"
    _run([*argv, "--out", "killed", "--executor", "local", "--workers", "1"])
    _same_tables(tmp_path / "inline", tmp_path / "killed")
    assert len(list(shards.glob("*.json"))) == len(PLACES)  # each pair written once
    assert not list(shards.glob("*.claim"))


@pytest.mark.slow
def test_ray_workers_asking_for_gpus_a_cluster_lacks_are_refused(tmp_path, monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    argv = [*COMMANDS["heads run"](tmp_path), "--model", "tiny:llama", "--out", "gpus"]
    try:
        with pytest.raises(SystemExit) as exit_:
            run_app(app, [*argv, "--executor", "ray", "--worker-gpus", "1"])
    finally:
        ray.shutdown()
    assert exit_.value.code == 2
    assert "GPUs per worker, it has 0" in capsys.readouterr().err


def test_local_workers_and_the_command_share_the_cores(monkeypatch):
    import torch

    from mechscope.runs.cores import shared_cores

    monkeypatch.delenv("MECHSCOPE_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    before = torch.get_num_threads()
    with shared_cores(3, ["heads", "run", "x.jsonl"]):
        assert torch.get_num_threads() == 2 and os.environ["OMP_NUM_THREADS"] == "2"
    assert torch.get_num_threads() == before and "OMP_NUM_THREADS" not in os.environ
    for argv in (["heads", "run", "--threads", "4"], ["heads", "run", "--threads=4"]):
        with shared_cores(3, argv):  # a chosen count is the user's
            assert torch.get_num_threads() == before and "OMP_NUM_THREADS" not in os.environ
    monkeypatch.setenv("MECHSCOPE_THREADS", "4")
    with shared_cores(3, ["heads", "run"]):
        assert "OMP_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("command", ["heads run", "lens diff"])
def test_a_worker_ends_once_its_shared_work_is_done(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MECHSCOPE_WORKER", "1")
    argv = [*COMMANDS[command](tmp_path), "--model", "tiny:llama", "--out", "w"]
    _run([*argv, "--executor", "inline"])  # exits 0
    assert list((tmp_path / "w" / "shards").rglob("*.json"))  # it computed every unit
    assert not list((tmp_path / "w").glob("tables/*.parquet"))  # the tables are its command's
    assert not (tmp_path / "w" / "report.html").exists()
    monkeypatch.delenv("MECHSCOPE_WORKER")
    _run(argv)  # the command: every unit is there, so it only gathers
    assert list((tmp_path / "w").glob("tables/*.parquet"))
