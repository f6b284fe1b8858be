"""One progress display for every long loop (rich; quiet when not on a terminal).

A workflow's loops call :func:`make_progress` or :func:`track` and get a bar with a
description, a count, the elapsed time and the time left. Rich allows one live display
per terminal, so when a caller already shows one (the demo's overall bar, opened with
:func:`shared_progress`), loops add their bars to it as extra lines and remove them when
they end, instead of opening a second display that rich would refuse.
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

T = TypeVar("T")

_SHARED: list[Progress] = []  # the display loops nest into, innermost last


def progress_enabled() -> bool:
    """Bars show on a terminal unless ``MECHSCOPE_PROGRESS=0``; CI logs stay clean."""
    flag = os.environ.get("MECHSCOPE_PROGRESS")
    if flag is not None:
        return flag not in ("0", "false", "no")
    return sys.stderr.isatty()


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

    def __init__(self, parent: Progress):
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


def make_progress() -> Progress | NestedProgress:
    """A new display, or bars nested in the display of :func:`shared_progress`."""
    if _SHARED:
        return NestedProgress(_SHARED[-1])
    return Progress(*_columns(), disable=not progress_enabled(), transient=False)


@contextmanager
def shared_progress(console: Console | None = None) -> Iterator[Progress]:
    """A live display that every loop run inside the block nests its bars into.

    Print through ``progress.console`` while it is live, so lines land above the bars.
    """
    progress = Progress(
        *_columns(), console=console, disable=not progress_enabled(), transient=False
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
