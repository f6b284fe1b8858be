"""What an adaptive resampling run recorded: per position, the rollouts it used and the
interval it reached; per trace, the total against the fixed design.

- ``anchors_adaptive`` (:attr:`AdaptiveResult.positions`): one row per (trace, position):
  ``rollouts`` drawn, ``usable``, ``correct``, ``no_answer``, ``rounds``, the ``accuracy``
  with its Wilson interval, how the position ended (``status``: resolved, cap, budget), and
  the importance of chunk ``position`` (positions ``p`` and ``p + 1``) with the Newcombe
  interval it stopped with and that interval's ``chunk_status`` (narrow, negligible, above,
  below, open; NaN on the last position, which has no chunk of its own). Intervals are at the rule's
  per-look level (``decision_confidence``).
- ``anchors_adaptive_traces`` (:attr:`AdaptiveResult.traces`): one row per trace:
  ``positions``, ``rollouts``, ``fixed_rollouts`` (``n`` per position), ``share`` and
  ``saving`` against them, rounds, the chunks by status, and the settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.rule import (
    ABOVE,
    BELOW,
    NARROW,
    NEGLIGIBLE,
    OPEN,
    decide,
    decision_confidence,
)
from mechscope.anchors.config import AdaptiveSettings
from mechscope.anchors.layout import ADAPTIVE_TABLE, ADAPTIVE_TRACES_TABLE
from mechscope.runs import RunDir, read_table
from mechscope.runs.result import HtmlRepr, frame_from_payload, frame_to_payload
from mechscope.stats import wilson_intervals

if TYPE_CHECKING:
    from mechscope.anchors.adaptive.state import TraceState


def trace_frame(state: TraceState, n: int, adaptive: AdaptiveSettings) -> pd.DataFrame:
    """The ``anchors_adaptive`` rows of one trace from its final counts."""
    d = decide(state.drawn, state.usable, state.correct, n, adaptive, state.prior)
    level = decision_confidence(adaptive, n)
    acc_low, acc_high = wilson_intervals(state.correct, state.usable, level)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(state.usable > 0, state.correct / np.maximum(state.usable, 1), np.nan)
    pad = lambda v, fill=np.nan: np.append(np.asarray(v, dtype=object), fill)  # noqa: E731
    return pd.DataFrame(
        {
            "trace": state.trace.id,
            "position": np.arange(state.n_positions),
            "rollouts": state.drawn,
            "usable": state.usable,
            "correct": state.correct,
            "no_answer": state.no_answer,
            "rounds": state.rounds,
            "accuracy": accuracy,
            "accuracy_low": acc_low,
            "accuracy_high": acc_high,
            "status": d.position_status().astype(str),
            "importance": pad(d.importance).astype(float),
            "importance_low": pad(d.low).astype(float),
            "importance_high": pad(d.high).astype(float),
            "importance_width": pad(d.high - d.low).astype(float),
            "chunk_status": pad(d.chunk_status, "").astype(str),
        }
    )


def _trace_row(part: pd.DataFrame, n: int, adaptive: AdaptiveSettings) -> dict[str, Any]:
    chunks = part["chunk_status"]
    fixed = n * len(part)
    return {
        "trace": part["trace"].iloc[0],
        "positions": len(part),
        "rollouts": int(part["rollouts"].sum()),
        "fixed_rollouts": fixed,
        "share": float(part["rollouts"].sum()) / fixed,
        "saving": 1 - float(part["rollouts"].sum()) / fixed,
        "rounds": int(part["rounds"].max()),
        "narrow": int((chunks == NARROW).sum()),
        "negligible": int((chunks == NEGLIGIBLE).sum()),
        "above": int((chunks == ABOVE).sum()),
        "below": int((chunks == BELOW).sum()),
        "open": int((chunks == OPEN).sum()),
        "n": n,
        "decision_confidence": decision_confidence(adaptive, n),
        **{k: (np.nan if v is None else v) for k, v in asdict(adaptive).items()},
    }


@dataclass
class AdaptiveResult(HtmlRepr):
    """The adaptive run's positions table and its per-trace totals (module docstring)."""

    positions: pd.DataFrame
    traces: pd.DataFrame

    @classmethod
    def from_frames(
        cls, frames: list[pd.DataFrame], n: int, adaptive: AdaptiveSettings
    ) -> AdaptiveResult:
        positions = pd.concat(frames, ignore_index=True)
        rows = [_trace_row(f, n, adaptive) for f in frames]
        return cls(positions, pd.DataFrame(rows))

    @property
    def total(self) -> tuple[int, int]:
        """``(rollouts drawn, rollouts of the fixed design)`` over every trace."""
        return int(self.traces["rollouts"].sum()), int(self.traces["fixed_rollouts"].sum())

    def to_frame(self) -> pd.DataFrame:
        """The main table: :attr:`positions`."""
        return self.positions

    def _repr_summary(self) -> str:
        drawn, fixed = self.total
        return f"{drawn:,} rollouts drawn, {fixed:,} in the fixed design"

    def to_payload(self) -> dict[str, Any]:
        return {
            "positions": frame_to_payload(self.positions),
            "traces": frame_to_payload(self.traces),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AdaptiveResult:
        return cls(frame_from_payload(payload["positions"]), frame_from_payload(payload["traces"]))

    @classmethod
    def from_run(cls, run: RunDir | Path | str) -> AdaptiveResult:
        """An adaptive run reopened without a model (an InputError before it finished)."""
        return cls(read_table(run, ADAPTIVE_TABLE), read_table(run, ADAPTIVE_TRACES_TABLE))
