"""``kill -9`` of a study running on worker processes leaves none of them behind.

A worker holds its own teacher and student (about 1.5 GB on SmolLM2); each orphan of a
killed run kept that memory until it was found by hand. The study runs in a child process
with two local workers (``--executor local --workers 2``) and enough steps not to finish;
once two of its processes are inside a trial the child is killed with SIGKILL, and within
5 s every process it started must be gone. (A worker is tied to its parent before it
starts Python, so one killed while still starting ends too.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [
    pytest.mark.slow,  # two worker processes start torch: about 20 s
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux ``/proc/<pid>/task/*/children``)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_9_leaves_no_worker(tmp_path, tiny_raw):
    raw = tiny_raw(students=[tiny_raw()["students"][0]])
    raw["train"] = {**raw["train"], "steps": 100_000, "checkpoint_every": 100_000}
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MECHSCOPE_PROGRESS": "0"}
    cmd = [str(Path(sys.executable).parent / "mechscope"), "distill", "run", str(config)]
    proc = subprocess.Popen(
        [*cmd, "--root", str(tmp_path / "runs"), "--executor", "local", "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started: set[int] = set()
    trials = tmp_path / "runs" / raw["name"] / "trials"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # two processes inside their trials
            started |= descendants(proc.pid)
            if trials.is_dir() and len(list(trials.iterdir())) >= 2:  # both in a trial
                break
            assert proc.poll() is None, "the study ended before its trials started"
            time.sleep(0.2)
        started |= descendants(proc.pid)
        # --workers is capped at one fewer than the trials (the command trains one too)
        assert started, "no worker process started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(5)
        left = sorted(p for p in started if alive(p))
        assert not left, f"processes of the killed study still running: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in started:
            if alive(p):
                os.kill(p, signal.SIGKILL)
