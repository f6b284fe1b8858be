"""One progress display for every long loop: tqdm bars in Python, rich bars or log lines
on the command line.

A workflow's loops call :func:`make_progress` or :func:`track` and get a bar with a
description, a count of units a user recognises (patches, paths, prompts), the elapsed time
and the time left.

Called from Python (a script, a notebook), nothing goes to stdout: each loop is a tqdm bar
(``tqdm.auto``: a widget in a notebook, stderr on a terminal; :class:`BarProgress`), and
the functions' ``progress=False`` turns it off. The command line (:func:`command_line`,
entered by :func:`mechscope.cli.errors.run_app`) keeps its display: rich allows one live
display per terminal, so when a caller already shows one (the demo's overall bar, opened
with :func:`shared_progress`), loops add their bars to it as extra lines and remove them
when they end, instead of opening a second display that rich would refuse. When stderr is
not a terminal (a CI log, ``nohup``, a cluster job) a live display would print nothing until
the end, so the same calls write a line per loop when it starts, every :data:`LOG_INTERVAL`
seconds while it runs (from a timer, also when one item takes longer), and when it ends:
done/total, elapsed and time left (:class:`LogProgress`). ``MECHSCOPE_PROGRESS=0``
silences every display, ``=1`` forces rich's live one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mechscope.progress.bars import BarProgress
from mechscope.progress.held import drop_warnings, hold_warnings, release_warnings
from mechscope.progress.log import LOG_INTERVAL, LogProgress

__all__ = [
    "LOG_INTERVAL",
    "BarProgress",
    "LogProgress",
    "NestedProgress",
    "command_line",
    "drop_warnings",
    "hold_warnings",
    "make_progress",
    "progress_enabled",
    "progress_mode",
    "release_warnings",
    "shared_progress",
    "track",
]

T = TypeVar("T")

_SHARED: list[Any] = []  # the display loops nest into, innermost last
_COMMAND_LINE: list[bool] = []  # non-empty while a command of the command line runs


def progress_mode() -> str:
    """``"bars"`` (tqdm, called from Python), on the command line ``"live"`` (rich bars) or
    ``"log"`` (lines, stderr not a terminal), or ``"off"`` (``MECHSCOPE_PROGRESS=0``)."""
    flag = os.environ.get("MECHSCOPE_PROGRESS")
    if flag is not None:
        return "off" if flag in ("0", "false", "no") else "live"
    if not _COMMAND_LINE:
        return "bars"
    return "live" if sys.stderr.isatty() else "log"


@contextmanager
def command_line() -> Iterator[None]:
    """While the block runs, loops show the command line's display (rich bars or log lines)
    instead of the Python API's tqdm bars."""
    _COMMAND_LINE.append(True)
    try:
        yield
    finally:
        _COMMAND_LINE.pop()


def progress_enabled() -> bool:
    """Whether live bars show: on a terminal, unless ``MECHSCOPE_PROGRESS=0``."""
    return progress_mode() == "live"


class EtaColumn(TimeRemainingColumn):
    """Rich's time-left estimate, or a caller's own: a task whose ``finish_at`` field holds
    a ``time.monotonic()`` deadline counts down to it (the demo knows better than a rate)."""

    def render(self, task: Task) -> Text:
        finish_at = task.fields.get("finish_at")
        if finish_at is None:
            return super().render(task)
        left = max(0, round(finish_at - time.monotonic()))
        hours, rest = divmod(left, 3600)
        return Text(f"~{hours}:{rest // 60:02d}:{rest % 60:02d}", style="progress.remaining")


def _columns() -> list[ProgressColumn]:
    return [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        EtaColumn(),
    ]


class NestedProgress:
    """Bars of one loop inside a display someone else owns (same methods as ``Progress``).

    ``start`` and ``stop`` do not touch the display; ``stop`` (or leaving the ``with``
    block) removes this loop's bars so finished loops do not pile up.
    """

    def __init__(self, parent: Progress | LogProgress):
        self.parent = parent
        self.tasks: list[TaskID] = []

    def start(self) -> None:
        """Nothing to start: the owner's display is live."""

    def stop(self) -> None:
        for task in self.tasks:
            self.parent.remove_task(task)
        self.tasks.clear()

    def __enter__(self) -> NestedProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_task(self, description: str, **kwargs: Any) -> TaskID:
        task = self.parent.add_task(description, **kwargs)
        self.tasks.append(task)
        return task

    def advance(self, task: TaskID, advance: float = 1) -> None:
        self.parent.advance(task, advance)

    def update(self, task: TaskID, **kwargs: Any) -> None:
        self.parent.update(task, **kwargs)


def make_progress(enabled: bool = True) -> Progress | NestedProgress | LogProgress | BarProgress:
    """A new display, or bars nested in the display of :func:`shared_progress`; one that
    shows nothing when not ``enabled`` (a function's ``progress=False``)."""
    mode = progress_mode() if enabled else "off"
    if _SHARED and mode != "off":
        return NestedProgress(_SHARED[-1])
    if mode == "bars":
        return BarProgress()
    if mode == "log":
        return LogProgress()
    return Progress(*_columns(), disable=mode != "live", transient=False)


@contextmanager
def shared_progress(console: Console | None = None) -> Iterator[Any]:
    """A live display that every loop run inside the block nests its bars into.

    Print through ``progress.console`` while it is live, so lines land above the bars (on
    the command line; called from Python the display is tqdm bars, each loop one more).
    """
    mode = progress_mode()
    progress: Any
    if mode == "bars":
        progress = BarProgress(console)
    elif mode == "log":
        progress = LogProgress(console=console)
    else:
        progress = Progress(*_columns(), console=console, disable=mode != "live", transient=False)
    with progress:
        _SHARED.append(progress)
        try:
            yield progress
        finally:
            _SHARED.remove(progress)


def track(
    items: Iterable[T],
    description: str,
    total: int | None = None,
    *,
    unit: str = "it",
    enabled: bool = True,
) -> Iterator[T]:
    """Iterate with a progress bar (description, count of ``unit``, elapsed, time left)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with make_progress(enabled) as progress:
        task = progress.add_task(description, total=total, unit=unit)
        for item in items:
            yield item
            progress.advance(task)
