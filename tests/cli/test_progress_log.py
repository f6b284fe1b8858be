"""Progress of a command whose stderr is not a terminal: log lines at the start, while
running, at the end (called from Python, loops show tqdm bars: tests/api/test_quiet.py)."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from mechscope import progress as progress_mod
from mechscope.progress import (
    BarProgress,
    LogProgress,
    command_line,
    make_progress,
    progress_mode,
    shared_progress,
)


def log_progress(interval: float) -> tuple[LogProgress, io.StringIO]:
    out = io.StringIO()
    return LogProgress(interval, Console(file=out, width=200)), out


def test_mode_follows_the_terminal_and_the_flag(monkeypatch):
    monkeypatch.delenv("MECHSCOPE_PROGRESS", raising=False)
    monkeypatch.setattr(progress_mod.sys.stderr, "isatty", lambda: False, raising=False)
    assert progress_mode() == "bars" and isinstance(make_progress(), BarProgress)  # Python
    with command_line():
        assert progress_mode() == "log" and isinstance(make_progress(), LogProgress)
        monkeypatch.setattr(progress_mod.sys.stderr, "isatty", lambda: True, raising=False)
        assert progress_mode() == "live"
        monkeypatch.setenv("MECHSCOPE_PROGRESS", "0")
        assert progress_mode() == "off" and not isinstance(make_progress(), LogProgress)
        monkeypatch.setenv("MECHSCOPE_PROGRESS", "1")
        assert progress_mode() == "live"
    assert progress_mode() == "live"  # the flag forces rich's display in Python too
    monkeypatch.delenv("MECHSCOPE_PROGRESS")
    assert progress_mode() == "bars"


def test_lines_at_start_on_a_timer_and_at_the_end():
    bar, out = log_progress(interval=0.05)
    with bar:
        task = bar.add_task("sweep", total=4)
        bar.advance(task)
        time.sleep(0.3)  # one slow item: the timer still writes lines meanwhile
        bar.advance(task, 3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sweep: 0/4 (0%), 0:00:00 elapsed")
    running = [ln for ln in lines if ln.startswith("sweep: 1/4 (25%)")]
    assert len(running) >= 2  # ~6 ticks in 0.3 s at 0.05 s; at least two on a busy machine
    assert all(re.search(r", ~\d+:\d\d:\d\d left$", ln) for ln in running)
    assert lines[-1].startswith("sweep: 4/4 (100%)") and "left" not in lines[-1]
    assert sum(ln.startswith("sweep: 4/4") for ln in lines) == 1  # the end is written once


def test_time_left_counts_only_this_runs_items():
    bar, _ = log_progress(interval=60)
    task = bar.add_task("shards", total=10, completed=8)  # 8 done by an earlier run
    assert "left" not in bar.line(task)  # no rate yet: nothing done in this run
    bar.tasks[task]["start"] -= 10.0
    bar.advance(task)  # one item in 10 s, one to go
    assert bar.line(task).endswith("~0:00:10 left")


def test_loops_nest_into_a_shared_log_display(monkeypatch):
    monkeypatch.delenv("MECHSCOPE_PROGRESS", raising=False)
    monkeypatch.setattr(progress_mod.sys.stderr, "isatty", lambda: False, raising=False)
    out = io.StringIO()
    with command_line(), shared_progress(Console(file=out, width=200)) as display:
        assert isinstance(display, LogProgress)
        overall = display.add_task("demo", total=1)
        with make_progress() as inner:  # a workflow's loop inside the demo
            task = inner.add_task("lens", total=2)
            inner.advance(task, 2)
        display.advance(overall)
    text = out.getvalue()
    assert "lens: 2/2 (100%)" in text and "demo: 1/1 (100%)" in text
