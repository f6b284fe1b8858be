"""Where a command's units of work are computed: this process only, local workers, or Ray.

One value holds the choice (:class:`ExecutorOptions`); it checks itself before any model
work and starts the workers beside this process for a block (:mod:`mechscope.runs.executor`).
The command line declares it once for every sharded command
(:mod:`mechscope.cli.executor_options`); a driver that starts workers itself (a distill
study) takes it as an argument.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class ExecutorOptions:
    """Where the samples are computed: this process only, local workers, or Ray."""

    executor: str = "inline"
    workers: int = 2
    address: str | None = None
    worker_gpus: float = 0.0

    def check(self) -> None:
        from mechscope.runs.executor import check_executor

        check_executor(self.executor, self.workers, self.address, self.worker_gpus)

    @contextmanager
    def alongside(self, units: int | None = None) -> Iterator[None]:
        """The workers compute beside this process for the block; ``units``: the units of
        work the command shares, when known (it bounds the workers)."""
        from mechscope.runs.executor import workers_alongside

        with workers_alongside(
            self.executor, self.workers, self.address, self.worker_gpus, units=units
        ):
            yield
