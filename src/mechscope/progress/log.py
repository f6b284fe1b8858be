"""Progress as log lines, for a command whose stderr is not a terminal (a CI log, ``nohup``,
a cluster job), where a live display would print nothing until the end."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from rich.console import Console

#: Seconds between two log lines of a running loop when stderr is not a terminal.
LOG_INTERVAL = 30.0


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
