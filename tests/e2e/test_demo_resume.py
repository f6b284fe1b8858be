"""``mechscope demo`` stopped at any point resumes to the same results; a finished one reruns
in seconds without touching a model.

The reference is the session's quick demo on the tiny demo model (``demo_run``). A second
demo into a fresh folder is interrupted twice, as a user would: Ctrl-C (SIGINT) while one
part is half done, then SIGKILL in the middle of a later part; a third invocation finishes
it. Its tables and arrays must equal the reference's.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from demo_helpers import demo_command, demo_env, differences, saved_results

import mechscope.demo as demo_module


def _manifest(run: Path) -> dict:
    try:
        return json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _part_started(run: Path, shards: str, part: str) -> Callable[[], bool]:
    """True once ``shards/<shards>/`` holds a finished sample while ``part`` is not done."""

    def check() -> bool:
        folder = run / "shards" / shards
        started = folder.is_dir() and any(folder.glob("*.json"))
        return started and not _manifest(run).get("parts", {}).get(part, {}).get("done", False)

    return check


def _interrupt(cmd: list, when: Callable[[], bool], sig: int, timeout: float = 600) -> int:
    """Start ``cmd``, send ``sig`` as soon as ``when()`` holds; the exit code."""
    proc = subprocess.Popen(
        cmd, env=demo_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + timeout
    try:
        while not when():
            if proc.poll() is not None:
                pytest.fail(f"the demo ended (exit {proc.returncode}) before it could be stopped")
            if time.monotonic() > deadline:
                pytest.fail("the demo did not reach the point where it should be stopped")
            time.sleep(0.02)
        proc.send_signal(sig)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode


def test_an_interrupted_demo_resumes_to_the_same_results(demo_run, demo_model, tmp_path):
    config = yaml.safe_load((demo_run / "config.yaml").read_text(encoding="utf-8"))
    parts = config["parts"]
    for needed in ("patching", "anchors"):
        if needed not in parts:
            pytest.skip(f"the reference demo has no {needed} part")
    out = tmp_path / "demo"
    cmd = demo_command(out, demo_model, parts)

    code = _interrupt(cmd, _part_started(out, "patching", "patching"), signal.SIGINT)
    assert code == 130, "Ctrl-C should end the demo with exit code 130"
    manifest = _manifest(out)
    assert manifest["status"] == "interrupted"
    assert not manifest["parts"]["patching"]["done"]
    assert manifest["parts"]["patching"]["seconds"] > 0  # the interrupted session is timed

    code = _interrupt(cmd, _part_started(out, "anchors_rollouts", "anchors"), signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not (out / "report.html").exists()

    done = subprocess.run(cmd, env=demo_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = _manifest(out)
    assert manifest["status"] == "finished" and len(manifest["resumed"]) == 2
    assert [p for p, e in manifest["parts"].items() if e["done"]] == parts
    assert "time per part" in done.stderr  # the closing table
    assert differences(saved_results(demo_run), saved_results(out)) == []


def test_a_finished_demo_reruns_without_a_model(demo_run, tmp_path, monkeypatch):
    config = yaml.safe_load((demo_run / "config.yaml").read_text(encoding="utf-8"))
    out = tmp_path / "demo"
    shutil.copytree(demo_run, out)
    before = saved_results(out)

    def no_model_work(*args, **kwargs):
        raise AssertionError("a finished demo must not load a model or run a part")

    monkeypatch.setattr(demo_module.ModelOptions, "load", no_model_work)
    for name, module in demo_module.demo_parts():
        if name in config["parts"]:
            monkeypatch.setattr(f"{module}.demo", no_model_work)
    report = demo_module.run_demo(
        out, model=config["model"], quick=config["quick"], only=config["parts"]
    )
    assert report == out / "report.html" and report.stat().st_size > 0
    assert differences(before, saved_results(out)) == []
    assert _manifest(out)["status"] == "finished"


def _done_parts(run: Path) -> list[str]:
    return [p for p, e in _manifest(run).get("parts", {}).items() if e.get("done")]


@pytest.mark.slow
def test_killed_at_random_points_in_every_part_resumes_to_the_same_results(
    demo_run, demo_model, tmp_path
):
    """SIGKILL once inside every part, at a random share (seeded) of the time that part took
    in the reference run after the session reached it, each time resuming the same demo;
    then finish it and compare with the uninterrupted reference. Parts shorter than the
    polling can resolve (overview, patching on the tiny model) may finish before their kill;
    at least half of the parts must be killed inside. A killed write's temporary file must
    not survive the resume."""
    import random

    config = yaml.safe_load((demo_run / "config.yaml").read_text(encoding="utf-8"))
    parts = config["parts"]
    took = {p: e["seconds"] for p, e in _manifest(demo_run)["parts"].items()}
    rng = random.Random(2026)
    out = tmp_path / "demo"
    cmd = demo_command(out, demo_model, parts)
    killed_in: list[str] = []
    for part in parts:
        if part in _done_parts(out):  # finished in an earlier session before its kill
            continue
        prior = set(parts[: parts.index(part)])  # done before this part starts
        sessions = len(_manifest(out).get("resumed", [])) if _manifest(out) else -1
        # early in the part: inside it even where it runs twice as fast as in the reference
        # (which ran under another load: the kernel sets run two workers at once)
        share = rng.uniform(0.05, 0.45)

        def running(prior: set = prior, sessions: int = sessions) -> bool:
            """This session opened the run (model loaded) and the parts before are done."""
            m = _manifest(out)
            opened = bool(m) and len(m.get("resumed", [])) > sessions
            return opened and prior <= set(_done_parts(out))

        proc = subprocess.Popen(
            cmd, env=demo_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 600
            while not running() and proc.poll() is None:
                if time.monotonic() > deadline:
                    pytest.fail(f"the demo never reached {part}")
                time.sleep(0.02)
            time.sleep(share * max(took.get(part, 1.0), 0.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                if part not in _done_parts(out):
                    killed_in.append(part)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(killed_in) >= len(parts) // 2, f"killed inside only {killed_in} of {parts}"
    done = subprocess.run(cmd, env=demo_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _manifest(out)["status"] == "finished"
    assert _done_parts(out) == parts
    assert differences(saved_results(demo_run), saved_results(out)) == []
