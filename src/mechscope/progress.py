"""One progress display for every long loop: live bars on a terminal, log lines elsewhere.

A workflow's loops call :func:`make_progress` or :func:`track` and get a bar with a
description, a count, the elapsed time and the time left. Rich allows one live display
per terminal, so when a caller already shows one (the demo's overall bar, opened with
:func:`shared_progress`), loops add their bars to it as extra lines and remove them when
they end, instead of opening a second display that rich would refuse.

When stderr is not a terminal (a CI log, ``nohup``, a cluster job) a live display would
print nothing until the end, so the same calls write a line per loop when it starts, every
:data:`LOG_INTERVAL` seconds while it runs (from a timer, also when one item takes
longer), and when it ends: done/total, elapsed and time left (:class:`LogProgress`).
``MECHSCOPE_PROGRESS=0`` silences both, ``=1`` forces the live display.

A refused command prints its refusal alone: the command line holds Python warnings raised
while the inputs are checked (:func:`hold_warnings`: a tokenizer dropping names a task then
lacks, a note on an input about to be refused) until the run directory opens, which shows
them (:func:`release_warnings`), or drops them with the refusal (:func:`drop_warnings`).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import warnings
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

T = TypeVar("T")

_SHARED: list[Any] = []  # the display loops nest into, innermost last


#: Seconds between two log lines of a running loop when stderr is not a terminal.
LOG_INTERVAL = 30.0


def progress_mode() -> str:
    """``"live"`` (rich bars), ``"log"`` (lines, stderr not a terminal) or ``"off"``
    (``MECHSCOPE_PROGRESS=0``)."""
    flag = os.environ.get("MECHSCOPE_PROGRESS")
    if flag is not None:
        return "off" if flag in ("0", "false", "no") else "live"
    return "live" if sys.stderr.isatty() else "log"


def progress_enabled() -> bool:
    """Whether live bars show: on a terminal, unless ``MECHSCOPE_PROGRESS=0``."""
    return progress_mode() == "live"


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class LogProgress:
    """The progress calls as log lines (the methods of ``rich.progress.Progress`` the
    workflows use), for output that is not a terminal."""

    def __init__(self, interval: float = LOG_INTERVAL, console: Console | None = None):
        self.interval = interval
        self.console = console or Console(stderr=True, soft_wrap=True, highlight=False)
        self.tasks: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._timer: threading.Thread | None = None

    def start(self) -> None:
        if self._timer is None:
            self._stopped.clear()
            self._timer = threading.Thread(target=self._tick, daemon=True)
            self._timer.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
        with self._lock:
            for task in list(self.tasks):
                self._end(task)

    def __enter__(self) -> LogProgress:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_task(
        self, description: str, total: float | None = None, completed: float = 0, **fields: Any
    ) -> int:
        task = next(self._ids)
        with self._lock:
            self.tasks[task] = {
                "description": description,
                "total": total,
                "completed": completed,
                "first": completed,  # done before this run: not counted in the rate
                "start": time.monotonic(),
                **fields,
            }
            self._print(task)
        return task

    def advance(self, task: int, advance: float = 1) -> None:
        with self._lock:
            t = self.tasks.get(task)
            if t is not None:
                t["completed"] += advance
                if t["total"] is not None and t["completed"] >= t["total"]:
                    self._end(task)

    def update(self, task: int, **fields: Any) -> None:
        with self._lock:
            if task in self.tasks:
                self.tasks[task].update(fields)

    def remove_task(self, task: int) -> None:
        with self._lock:
            self._end(task)

    def line(self, task: int) -> str:
        """``description: done/total (share), elapsed, time left``."""
        t = self.tasks[task]
        elapsed = time.monotonic() - t["start"]
        done, total = t["completed"], t["total"]
        text = f"{t['description']}: {done:g}" + (f"/{total:g}" if total else "")
        if total:
            text += f" ({done / total:.0%})"
        text += f", {_clock(elapsed)} elapsed"
        if t.get("finish_at") is not None:
            text += f", ~{_clock(t['finish_at'] - time.monotonic())} left"
        elif total and done > t["first"] and done < total:
            rate = (done - t["first"]) / elapsed
            text += f", ~{_clock((total - done) / rate)} left"
        return text

    def _print(self, task: int) -> None:
        self.console.print(self.line(task), markup=False)

    def _end(self, task: int) -> None:
        if task in self.tasks:
            self._print(task)
            del self.tasks[task]

    def _tick(self) -> None:
        while not self._stopped.wait(self.interval):
            with self._lock:
                for task in list(self.tasks):
                    self._print(task)


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


def make_progress() -> Progress | NestedProgress | LogProgress:
    """A new display, or bars nested in the display of :func:`shared_progress`."""
    if _SHARED:
        return NestedProgress(_SHARED[-1])
    if progress_mode() == "log":
        return LogProgress()
    return Progress(*_columns(), disable=not progress_enabled(), transient=False)


@contextmanager
def shared_progress(console: Console | None = None) -> Iterator[Progress | LogProgress]:
    """A live display that every loop run inside the block nests its bars into.

    Print through ``progress.console`` while it is live, so lines land above the bars.
    """
    progress: Any = (
        LogProgress(console=console)
        if progress_mode() == "log"
        else Progress(*_columns(), console=console, disable=not progress_enabled(), transient=False)
    )
    with progress:
        _SHARED.append(progress)
        try:
            yield progress
        finally:
            _SHARED.remove(progress)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar (description, count, elapsed, time left)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with make_progress() as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


_HELD: list[tuple[Any, ...]] = []
_SHOW: list[Any] = []  # warnings.showwarning while warnings are held


def hold_warnings() -> None:
    """Keep Python warnings back instead of showing them, until :func:`release_warnings`
    or :func:`drop_warnings`."""
    if _SHOW:
        return
    _SHOW.append(warnings.showwarning)
    warnings.showwarning = lambda *args, **kwargs: _HELD.append((args, kwargs))


def release_warnings() -> None:
    """Show the warnings held back, in order, and show new ones as they come (a run
    directory opened: every input check passed)."""
    if _SHOW:
        warnings.showwarning = _SHOW.pop()
    held, _HELD[:] = list(_HELD), []
    for args, kwargs in held:
        warnings.showwarning(*args, **kwargs)


def drop_warnings() -> None:
    """Forget the warnings held back (the command was refused: its one line says why)."""
    _HELD.clear()
    release_warnings()
