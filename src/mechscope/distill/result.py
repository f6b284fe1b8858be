"""What a distillation study returns (:class:`DistillResult`), and its result contract.

A study's numbers live in its trials' run directories (one metrics row per trial, written
last); the result gathers those rows in grid order, so the summary, the figures and the
report read one table instead of walking the study folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mechscope.runs import RunDir, read_table
from mechscope.runs.result import HtmlRepr, frame_from_payload, frame_to_payload


@dataclass
class DistillResult(HtmlRepr):
    """The finished trials of a study: one metrics row each (student, task, method, seed,
    accuracy, causal consistency, OOD degradation, perplexity, training steps, ...)."""

    trials: pd.DataFrame
    #: The study folder the rows were read from (None for rows read back from a table).
    path: Path | None = None

    def to_frame(self) -> pd.DataFrame:
        """One row per trial (the study's ``distill_trials`` table)."""
        return self.trials

    def to_payload(self) -> dict[str, Any]:
        return {
            "trials": frame_to_payload(self.trials),
            "path": None if self.path is None else str(self.path),
        }

    @classmethod
    def from_run(cls, run: RunDir | Path | str) -> DistillResult:
        """A summarised study reopened without a model: the ``distill_trials`` table its
        summary wrote (``distill summarize``, or the end of ``distill run``), whose rows are
        in the order of the trials' folder names rather than the grid's."""
        path = run.path if isinstance(run, RunDir) else Path(run)
        return cls(read_table(run, "distill_trials"), path)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DistillResult:
        path = payload["path"]
        return cls(frame_from_payload(payload["trials"]), None if path is None else Path(path))
