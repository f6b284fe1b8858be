"""One trace's counts during adaptive resampling: what each round decides from.

The adaptive run records every batch it reads back here, and its result's per-trace table
(:func:`mechscope.anchors.adaptive.result.trace_frame`) is a view of the same counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.anchors.traces.trace import Trace


@dataclass
class TraceState:
    """One trace's counts so far, per position ``0 … P-1`` (arrays ``[P]``)."""

    trace: Trace
    n_positions: int
    prior: np.ndarray | None = None
    drawn: np.ndarray = field(init=False)
    usable: np.ndarray = field(init=False)
    correct: np.ndarray = field(init=False)
    no_answer: np.ndarray = field(init=False)
    rounds: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        zeros = lambda: np.zeros(self.n_positions, dtype=np.int64)  # noqa: E731
        self.drawn, self.usable, self.correct = zeros(), zeros(), zeros()
        self.no_answer, self.rounds = zeros(), zeros()

    def record(self, position: int, rollouts: Sequence[Rollout], count_no_answer: bool) -> None:
        self.drawn[position] += len(rollouts)
        self.usable[position] += sum(r.has_answer or count_no_answer for r in rollouts)
        self.correct[position] += sum(r.is_correct for r in rollouts)
        self.no_answer[position] += sum(not r.has_answer for r in rollouts)
        self.rounds[position] += 1
