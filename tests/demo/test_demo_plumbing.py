"""The demo's plumbing without a model: part selection, the time-left estimate, the closing
table, and loops nesting their progress bars into the demo's display."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from mechscope import demo_timing
from mechscope import progress as progress_module
from mechscope.demo import demo_parts, finished, select_parts
from mechscope.demo_timing import Session, TimeLeft, reference_seconds
from mechscope.errors import InputError
from mechscope.progress import NestedProgress, make_progress, shared_progress, track
from mechscope.runs import RunDir
from tolerance import assert_fp64_close


def test_parts_are_selected_in_report_order_and_unknown_ones_refused():
    names = [n for n, _ in demo_parts()]
    assert select_parts(None) == [p for p in names if p in select_parts(None)]
    assert select_parts(["anchors", "overview"]) == ["overview", "anchors"]
    with pytest.raises(InputError, match="--only nope"):
        select_parts(["overview", "nope"])


def test_finished_needs_every_selected_part_done(tmp_path):
    assert not finished(tmp_path / "none", ["overview"])
    run = RunDir.create(tmp_path, "d", {"parts": ["overview", "lens"]})
    run.record_part("overview", 1.0, done=True)
    assert finished(run.path, ["overview"])
    assert not finished(run.path, ["overview", "lens"])
    run.record_part("lens", 1.0, done=False)
    assert not finished(run.path, ["overview", "lens"])


def test_time_left_starts_from_reference_and_recalibrates(monkeypatch):
    now = 1000.0  # a clock that stands still: the estimate is a float64 formula
    monkeypatch.setattr(demo_timing, "time", SimpleNamespace(monotonic=lambda: now))
    eta = TimeLeft(quick=True)
    parts = ["overview", "lens", "patching"]
    expected = sum(reference_seconds(p, True) for p in parts)
    # now + left − now: a few sums of seconds, rounded at the clock's reading
    scale = now + 2 * expected
    assert_fp64_close(eta.finish_at(parts) - now, expected, terms=3, scale=scale, msg="first")
    eta.observe("overview", 2 * reference_seconds("overview", True))  # this machine: 2x slower
    assert eta.speed == 2.0  # 2r / r
    left = eta.finish_at(parts[1:]) - now
    want = 2 * (expected - reference_seconds("overview", True))
    assert_fp64_close(left, want, terms=3, scale=scale, msg="recalibrated")
    assert reference_seconds("a-new-part", False) > 0


def test_closing_table_lists_every_part_with_both_times():
    session = Session()
    session.steps["load model"] = 0.8
    session.status |= {"overview": "reused", "lens": "resumed"}
    session.seconds |= {"lens": 30.0}
    session.steps["report"] = 4.0
    saved = {"overview": {"seconds": 2.0, "done": True}, "lens": {"seconds": 95.0, "done": True}}
    console = Console(record=True, width=100)
    console.print(session.table(saved, total=36.0))
    text = console.export_text()
    for needle in ("load model", "overview", "reused", "resumed", "30.0 s", "1 min 35 s",
                   "report", "total", "36.0 s", "1 min 37 s"):  # fmt: skip
        assert needle in text, needle


def test_loops_nest_into_the_shared_display_and_clean_up(monkeypatch):
    monkeypatch.setenv("MECHSCOPE_PROGRESS", "1")
    console = Console(record=True, width=120, force_terminal=True)
    with shared_progress(console) as shared:
        outer = shared.add_task("demo", total=2)
        assert isinstance(make_progress(), NestedProgress)
        for _ in track(range(3), "inner loop"):  # a second live display would raise here
            assert len(shared.tasks) == 2
        assert [t.id for t in shared.tasks] == [outer]  # the loop's bar is gone
        bar = make_progress()
        bar.start()
        task = bar.add_task("sharded", total=4)
        bar.update(task, description="sharded · sample-1")
        bar.advance(task)
        bar.stop()
        assert [t.id for t in shared.tasks] == [outer]
    assert progress_module._SHARED == []
    assert not isinstance(make_progress(), NestedProgress)


def test_a_given_deadline_counts_down_in_the_eta_column():
    column = progress_module.EtaColumn()
    with shared_progress(Console(record=True)) as shared:
        task = shared.add_task("demo", total=3, finish_at=time.monotonic() + 125)
        text = column.render(shared.tasks[0]).plain
    assert task == 0 and text in ("~0:02:05", "~0:02:04")
