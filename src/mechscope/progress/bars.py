"""Progress as tqdm bars, for loops run from Python (a script, a notebook)."""

from __future__ import annotations

import itertools
from typing import Any

from rich.console import Console


class BarProgress:
    """The progress calls as tqdm bars (``tqdm.auto``: a widget in a notebook, stderr on a
    terminal), for loops run from Python; ``unit`` names what a bar counts."""

    def __init__(self, console: Console | None = None) -> None:
        self.bars: dict[int, Any] = {}
        self._ids = itertools.count()
        #: where a caller prints lines meanwhile (as through a rich display's console)
        self.console = console or Console(stderr=True, highlight=False)

    def start(self) -> None:
        """Nothing to start: each bar shows when it is added."""

    def stop(self) -> None:
        for task in list(self.bars):
            self.remove_task(task)

    def __enter__(self) -> BarProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_task(
        self, description: str, total: float | None = None, completed: float = 0, **fields: Any
    ) -> int:
        from tqdm.auto import tqdm

        task = next(self._ids)
        unit = fields.get("unit", "it")
        self.bars[task] = tqdm(total=total, initial=completed, desc=description, unit=unit)
        return task

    def advance(self, task: int, advance: float = 1) -> None:
        if task in self.bars:
            self.bars[task].update(advance)

    def update(self, task: int, **fields: Any) -> None:
        if task in self.bars and "description" in fields:
            self.bars[task].set_description(fields["description"])

    def remove_task(self, task: int) -> None:
        bar = self.bars.pop(task, None)
        if bar is not None:
            bar.close()
